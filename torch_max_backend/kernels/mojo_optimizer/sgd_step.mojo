# One SGD-with-momentum update of one parameter, in place: the parameter
# and its momentum buffer read once and written once, the gradient read
# once (and with multi-tensor nesterov written once: its new direction).
# Lowered op by op, the update is two fused kernels that each store one of
# the two and read their inputs again (docs/benchmarks.md, "Training
# steps").

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

from .rounding import check_float, load_wide, rounded, rounded_number

# Values one task updates: a few tasks a core for a large parameter, one
# task (no parallel dispatch to wait for) for a small one.
comptime _CHUNK = 32768


def _sgd_updates[
    dtype: DType, maximize: Bool, writes_direction: Bool
](
    p: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    b: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    g: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    direction: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    c: UnsafePointer[Float32, ImmutAnyOrigin],
    n: Int,
):
    """The update of `n` values, in tasks of `_CHUNK`, with SgdStep's
    coefficients `c`; with `writes_direction`, the step's direction stored
    at `direction` (the gradient's own memory), else `direction` unused.
    Computed in float32; half-precision values are rounded to their type
    after each op of torch's step, as its ops store them."""
    comptime width = simd_width_of[DType.float32]()
    # Eager's `add(x, y, alpha=...)` on half-precision values rounds its
    # alpha to their type (a multiplier, as `momentum`, it keeps as float).
    var decay = rounded_number[dtype](c.unsafe_offset(0).unsafe_load())
    var momentum = c.unsafe_offset(1).unsafe_load()
    var damped = rounded_number[dtype](c.unsafe_offset(2).unsafe_load())
    var nesterov = c.unsafe_offset(3).unsafe_load() != 0
    var pull = rounded_number[dtype](c.unsafe_offset(4).unsafe_load())
    var rate = rounded_number[dtype](c.unsafe_offset(5).unsafe_load())
    var decays = decay != 0

    def update[w: Int](i: Int) {var}:
        var pv = load_wide[w](p, i)
        var d = load_wide[w](g, i)
        comptime if maximize:
            d = -d
        # Each `x + alpha * y` one fused multiply-add, as torch's vectorized
        # `add(x, y, alpha=...)` computes it, so that the results are eager's
        # bit for bit whatever the compiler would contract.
        if decays:
            d = rounded[dtype](pv.fma(decay, d))
        var bv = rounded[dtype](load_wide[w](b, i) * momentum)
        var b_new = rounded[dtype](d.fma(damped, bv))
        var step = b_new
        if nesterov:
            step = rounded[dtype](b_new.fma(pull, d))
        b.unsafe_offset(i).unsafe_store(b_new.cast[dtype]())
        comptime if writes_direction:
            direction.unsafe_offset(i).unsafe_store(step.cast[dtype]())
        p.unsafe_offset(i).unsafe_store(step.fma(rate, pv).cast[dtype]())

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
        dtype: DType, rank: Int, //, maximize: Bool, target: StaticString
    ](
        param: MutableInputTensor[dtype=dtype, rank=rank, ...],
        buf: MutableInputTensor[dtype=dtype, rank=rank, ...],
        grad: InputTensor[dtype=dtype, rank=rank, ...],
        coefficients: InputTensor[dtype=DType.float32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_sgd_step runs on CPU"
        check_float[dtype]()
        _sgd_updates[dtype, maximize, False](
            param.unsafe_ptr(),
            buf.unsafe_ptr(),
            grad.unsafe_ptr(),
            param.unsafe_ptr(),  # no direction written: never stored to
            coefficients.unsafe_ptr(),
            param.size(),
        )


@extensibility.register("torch_max_backend_sgd_direction_step")
struct SgdDirectionStep:
    """SgdStep's update as torch's multi-tensor SGD with nesterov writes it
    (torch/optim/sgd.py, `_foreach_add_(grads, bufs, alpha=momentum)`):
    the new direction `d + nesterov's momentum * buf` is also stored into
    the gradient, which eager leaves holding it."""

    @staticmethod
    def execute[
        dtype: DType, rank: Int, //, maximize: Bool, target: StaticString
    ](
        param: MutableInputTensor[dtype=dtype, rank=rank, ...],
        buf: MutableInputTensor[dtype=dtype, rank=rank, ...],
        grad: MutableInputTensor[dtype=dtype, rank=rank, ...],
        coefficients: InputTensor[dtype=DType.float32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert (
            target == "cpu"
        ), "torch_max_backend_sgd_direction_step runs on CPU"
        check_float[dtype]()
        _sgd_updates[dtype, maximize, True](
            param.unsafe_ptr(),
            buf.unsafe_ptr(),
            grad.unsafe_ptr(),
            grad.unsafe_ptr(),
            coefficients.unsafe_ptr(),
            param.size(),
        )
