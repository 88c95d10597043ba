# One SGD-with-momentum update of one parameter, in place: the parameter
# and its momentum buffer read once and written once, the gradient read
# once. Lowered op by op, the update is two fused kernels that each store
# one of the two and read their inputs again (docs/benchmarks.md,
# "Training steps").

import extensibility
from extensibility import InputTensor
# MAX 26.7 exports the mutable-input spec under this private name only.
from extensibility.managed_tensor_slice import (
    _MutableInputTensor as MutableInputTensor,
)
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.sys import simd_width_of
from std.utils.index import IndexList

# Values one task updates: a few tasks a core for a large parameter, one
# task (no parallel dispatch to wait for) for a small one.
comptime _CHUNK = 32768


@extensibility.register("torch_max_backend_sgd_step")
struct SgdStep:
    """SGD's update as torch's compiled single-tensor SGD with momentum
    writes it (torch/optim/sgd.py), with `coefficients` = [weight_decay,
    momentum, 1 - dampening, nesterov (1 or 0), nesterov's momentum, -lr]:

        d     = grad + weight_decay * param   (grad alone when 0)
        buf   = buf * momentum + (1 - dampening) * d
        step  = d + nesterov's momentum * buf  (buf alone without nesterov)
        param = param + (-lr) * step

    With `maximize` the gradient is negated first, as torch does. The
    terms torch leaves out are left out here too, so an infinite
    gradient gives eager's result rather than 0 * inf."""

    @staticmethod
    def execute[
        rank: Int, //, maximize: Bool, target: StaticString
    ](
        param: MutableInputTensor[dtype=DType.float32, rank=rank, ...],
        buf: MutableInputTensor[dtype=DType.float32, rank=rank, ...],
        grad: InputTensor[dtype=DType.float32, rank=rank, ...],
        coefficients: InputTensor[dtype=DType.float32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_sgd_step runs on CPU"
        comptime width = simd_width_of[DType.float32]()
        var decay = coefficients.load[1](IndexList[1](0))
        var momentum = coefficients.load[1](IndexList[1](1))
        var damped = coefficients.load[1](IndexList[1](2))
        var nesterov = coefficients.load[1](IndexList[1](3)) != 0
        var pull = coefficients.load[1](IndexList[1](4))
        var rate = coefficients.load[1](IndexList[1](5))
        var decays = decay != 0
        var n = param.size()
        var p = param.unsafe_ptr()
        var b = buf.unsafe_ptr()
        var g = grad.unsafe_ptr()

        def update[w: Int](i: Int) {var}:
            var pv = p.unsafe_offset(i).unsafe_load[width=w]()
            var d = g.unsafe_offset(i).unsafe_load[width=w]()
            comptime if maximize:
                d = -d
            if decays:
                d = d + pv * decay
            var bv = b.unsafe_offset(i).unsafe_load[width=w]() * momentum
            var b_new = bv + d * damped
            var step = b_new
            if nesterov:
                step = d + b_new * pull
            b.unsafe_offset(i).unsafe_store(b_new)
            p.unsafe_offset(i).unsafe_store(pv + step * rate)

        def chunk(task: Int) {var}:
            var end = min(n, (task + 1) * _CHUNK)
            var i = task * _CHUNK
            while i + width <= end:
                update[width](i)
                i += width
            while i < end:
                update[1](i)
                i += 1

        var tasks = ceildiv(n, _CHUNK)
        if tasks == 1:
            chunk(0)
        else:
            parallelize(chunk, tasks)
