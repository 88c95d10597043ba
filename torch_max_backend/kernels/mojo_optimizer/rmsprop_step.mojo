# One RMSprop update of one parameter, in place: the parameter and its
# square average read once and written once, the gradient read once.
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
from std.math import ceildiv, sqrt
from std.sys import simd_width_of

from .rounding import check_float, load_wide, rounded, rounded_number

# Values one task updates: a few tasks a core for a large parameter, one
# task (no parallel dispatch to wait for) for a small one.
comptime _CHUNK = 32768


def _rmsprop_updates[
    dtype: DType, maximize: Bool
](
    p: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    v: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    g: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    c: UnsafePointer[Float32, ImmutAnyOrigin],
    n: Int,
):
    """The update of `n` values, in tasks of `_CHUNK`, with RmspropStep's
    coefficients `c`. Computed in float32 in the order of eager's kernels;
    half-precision values are rounded to their type after each op."""
    comptime width = simd_width_of[DType.float32]()
    # Eager's `add(x, y, alpha=...)` on half-precision values rounds its
    # alpha to their type.
    var decay = rounded_number[dtype](c.unsafe_offset(0).unsafe_load())
    var alpha = c.unsafe_offset(1).unsafe_load()
    var weight = c.unsafe_offset(2).unsafe_load()
    var eps = c.unsafe_offset(3).unsafe_load()
    var rate = c.unsafe_offset(4).unsafe_load()
    var decays = decay != 0

    def update[lanes: Int](i: Int) {var}:
        var pv = load_wide[lanes](p, i)
        var d = load_wide[lanes](g, i)
        comptime if maximize:
            d = -d
        if decays:
            # `grad.add(param, alpha=decay)`: one fused multiply-add, as
            # torch's vectorized loop computes it.
            d = rounded[dtype](pv.fma(decay, d))
        # addcmul as eager's kernel: fma(value * t1, t2, self), rounded once.
        var v_new = rounded[dtype](
            (d * weight).fma(d, rounded[dtype](load_wide[lanes](v, i) * alpha))
        )
        var average = rounded[dtype](rounded[dtype](sqrt(v_new)) + eps)
        # addcdiv as eager's kernel: self + (value * t1) / t2, rounded once.
        var p_new = pv + (d * rate) / average
        v.unsafe_offset(i).unsafe_store(v_new.cast[dtype]())
        p.unsafe_offset(i).unsafe_store(p_new.cast[dtype]())

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


@extensibility.register("torch_max_backend_rmsprop_step")
struct RmspropStep:
    """RMSprop's update as torch's single-tensor RMSprop writes it
    (torch/optim/rmsprop.py, without momentum and not centered), with
    `coefficients` = [weight_decay, alpha, 1 - alpha, eps, -lr]:

        d          = grad + weight_decay * param   (grad alone when 0)
        square_avg = square_avg * alpha + (1 - alpha) * d * d
        param      = param + (-lr) * d / (sqrt(square_avg) + eps)

    With `maximize` the gradient is negated first, as torch does. bfloat16
    and float16 values are computed in float32 and rounded to their type
    after each op, as eager's ops store them."""

    @staticmethod
    def execute[
        dtype: DType, rank: Int, //, maximize: Bool, target: StaticString
    ](
        param: MutableInputTensor[dtype=dtype, rank=rank, ...],
        square_avg: MutableInputTensor[dtype=dtype, rank=rank, ...],
        grad: InputTensor[dtype=dtype, rank=rank, ...],
        coefficients: InputTensor[dtype=DType.float32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert (
            target == "cpu"
        ), "torch_max_backend_rmsprop_step runs on CPU"
        check_float[dtype]()
        _rmsprop_updates[dtype, maximize](
            param.unsafe_ptr(),
            square_avg.unsafe_ptr(),
            grad.unsafe_ptr(),
            coefficients.unsafe_ptr(),
            param.size(),
        )
