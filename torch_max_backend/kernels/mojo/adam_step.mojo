# One Adam or AdamW update of one parameter, in place: the parameter, its
# first and second moments read once and written once, the gradient read
# once. Lowered op by op, the update is a few fused kernels that each store
# one of the three and read their inputs again: a ResNet-18 update ran at a
# fifth of the memory's speed (docs/benchmarks.md, "Training steps").

import extensibility
from extensibility import InputTensor
# MAX 26.7 exports the mutable-input spec under this private name only.
from extensibility.managed_tensor_slice import (
    _MutableInputTensor as MutableInputTensor,
)
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv, sqrt
from std.sys import simd_width_of
from std.utils.index import IndexList

# Values one task updates: a few tasks a core for a large parameter, one
# task (no parallel dispatch to wait for) for a small one.
comptime _CHUNK = 32768


@extensibility.register("torch_max_backend_adam_step")
struct AdamStep:
    """Adam's update as torch's compiled single-tensor Adam and AdamW write
    it (torch/optim/adam.py, capturable form), with `coefficients` =
    [decay, w1, beta2, w2, a, b]:

        exp_avg    = lerp(exp_avg, grad, w1)
        exp_avg_sq = (grad * grad) * w2 + exp_avg_sq * beta2
        param      = param * decay + exp_avg / (sqrt(exp_avg_sq) / a + b)

    `a` and `b` carry the step's bias corrections and learning rate, so
    one compiled graph serves every step. With `coupled_decay` (Adam's
    own weight decay, `grad = grad + wd * param`), `decay` is that `wd`
    and the parameter is not scaled:

        grad  = grad + param * decay
        param = param + exp_avg / (sqrt(exp_avg_sq) / a + b)"""

    @staticmethod
    def execute[
        rank: Int, //, coupled_decay: Bool, target: StaticString
    ](
        param: MutableInputTensor[dtype=DType.float32, rank=rank, ...],
        exp_avg: MutableInputTensor[dtype=DType.float32, rank=rank, ...],
        exp_avg_sq: MutableInputTensor[dtype=DType.float32, rank=rank, ...],
        grad: InputTensor[dtype=DType.float32, rank=rank, ...],
        coefficients: InputTensor[dtype=DType.float32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_adam_step runs on CPU"
        comptime width = simd_width_of[DType.float32]()
        var decay = coefficients.load[1](IndexList[1](0))
        var w1 = coefficients.load[1](IndexList[1](1))
        var beta2 = coefficients.load[1](IndexList[1](2))
        var w2 = coefficients.load[1](IndexList[1](3))
        var a = coefficients.load[1](IndexList[1](4))
        var b = coefficients.load[1](IndexList[1](5))
        # torch's lerp: from the nearer end, as eager computes it.
        var from_start = abs(w1) < 0.5
        var n = param.size()
        var p = param.unsafe_ptr()
        var m = exp_avg.unsafe_ptr()
        var v = exp_avg_sq.unsafe_ptr()
        var g = grad.unsafe_ptr()

        def update[w: Int](i: Int) {var}:
            var gv = g.unsafe_offset(i).unsafe_load[width=w]()
            var mv = m.unsafe_offset(i).unsafe_load[width=w]()
            var vv = v.unsafe_offset(i).unsafe_load[width=w]()
            var pv = p.unsafe_offset(i).unsafe_load[width=w]()
            var scaled = pv * decay
            comptime if coupled_decay:
                gv = gv + scaled
                scaled = pv
            var diff = gv - mv
            var m_new: SIMD[DType.float32, w]
            if from_start:
                m_new = mv + diff * w1
            else:
                m_new = gv - diff * (1 - w1)
            var v_new = (gv * gv) * w2 + vv * beta2
            var p_new = scaled + m_new / (sqrt(v_new) / a + b)
            m.unsafe_offset(i).unsafe_store(m_new)
            v.unsafe_offset(i).unsafe_store(v_new)
            p.unsafe_offset(i).unsafe_store(p_new)

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
