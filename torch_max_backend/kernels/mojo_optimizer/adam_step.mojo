# One Adam or AdamW update of one parameter, in place: the parameter and its
# state (both moments, and with amsgrad the largest second moment so far)
# read once and written once, the gradient read once. Lowered op by op, the
# update is a few fused kernels that each store one of them and read their
# inputs again: a ResNet-18 update ran at a fifth of the memory's speed, an
# amsgrad step over GPT-2's parameters 5x slower than this kernel
# (docs/benchmarks.md, "Training steps").

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

from .rounding import check_float, is_nan, load_wide, rounded, rounded_number

# Values one task updates: a few tasks a core for a large parameter, one
# task (no parallel dispatch to wait for) for a small one.
comptime _CHUNK = 32768


def _adam_updates[
    dtype: DType, amsgrad: Bool, coupled_decay: Bool, maximize: Bool
](
    p: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    m: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    v: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    v_max: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    g: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    c: UnsafePointer[Float32, ImmutAnyOrigin],
    n: Int,
):
    """The update of `n` values, in tasks of `_CHUNK` (`v_max` is read and
    written with `amsgrad` only; the coefficients as AdamStep's). Computed
    in float32; half-precision values are rounded to their type wherever
    torch's single-tensor step rounds them (see AdamStep)."""
    comptime width = simd_width_of[DType.float32]()
    var decay = c.unsafe_offset(0).unsafe_load()
    var w1 = c.unsafe_offset(1).unsafe_load()
    var beta2 = c.unsafe_offset(2).unsafe_load()
    var w2 = c.unsafe_offset(3).unsafe_load()
    var a = c.unsafe_offset(4).unsafe_load()
    var b = c.unsafe_offset(5).unsafe_load()
    # torch's lerp: from the nearer end, as eager computes it.
    var from_start = abs(w1) < 0.5

    def update[w: Int](i: Int) {var}:
        var gv = load_wide[w](g, i)
        comptime if maximize:
            gv = -gv
        var mv = load_wide[w](m, i)
        var vv = load_wide[w](v, i)
        var pv = load_wide[w](p, i)
        var scaled = pv
        comptime if coupled_decay:
            # `grad.add(param, alpha=decay)`: eager rounds a half-precision
            # add's alpha to the values' type.
            gv = rounded[dtype](gv + pv * rounded_number[dtype](decay))
        else:
            scaled = rounded[dtype](pv * decay)
        var diff = gv - mv
        var m_new: SIMD[DType.float32, w]
        if from_start:
            m_new = mv + diff * w1
        else:
            m_new = gv - diff * (1 - w1)
        m_new = rounded[dtype](m_new)
        # addcmul as eager's kernel: fma(value * t1, t2, self), rounded once.
        var v_new = rounded[dtype]((gv * w2).fma(gv, rounded[dtype](vv * beta2)))
        var v_used = v_new
        comptime if amsgrad:
            var vm = load_wide[w](v_max, i)
            # torch.maximum: NaN wherever either is NaN (told by the bits:
            # MAX compiles kernels with fast-math flags).
            v_used = max(vm, v_new)
            v_used = is_nan(v_new).select(v_new, v_used)
            v_used = is_nan(vm).select(vm, v_used)
            v_max.unsafe_offset(i).unsafe_store(v_used.cast[dtype]())
        var denominator = rounded[dtype](
            rounded[dtype](rounded[dtype](sqrt(v_used)) / a) + b
        )
        var p_new = scaled + m_new / denominator
        m.unsafe_offset(i).unsafe_store(m_new.cast[dtype]())
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


@extensibility.register("torch_max_backend_adam_step")
struct AdamStep:
    """Adam's update as torch's compiled single-tensor Adam and AdamW write
    it (torch/optim/adam.py, capturable form), with `coefficients` =
    [decay, w1, beta2, w2, a, b]:

        exp_avg    = lerp(exp_avg, grad, w1)
        exp_avg_sq = fma(w2 * grad, grad, exp_avg_sq * beta2)
        param      = param * decay + exp_avg / (sqrt(exp_avg_sq) / a + b)

    `a` and `b` carry the step's bias corrections and learning rate, so
    one compiled graph serves every step. With `coupled_decay` (Adam's
    own weight decay, `grad = grad + wd * param`), `decay` is that `wd`
    and the parameter is not scaled:

        grad  = grad + param * decay
        param = param + exp_avg / (sqrt(exp_avg_sq) / a + b)

    With `maximize` the gradient is negated first, as torch does.

    bfloat16 and float16 values are computed in float32 and rounded to
    their type wherever the step's ops, one by one, store a result of it:
    the decayed parameter (or the decayed gradient), the new moments, the
    scaled second moment, the root, the quotient, the denominator and the
    new parameter (lerp, addcmul and addcdiv compute in float32 and round
    once, as eager's kernels for those types do)."""

    @staticmethod
    def execute[
        dtype: DType,
        rank: Int,
        //,
        coupled_decay: Bool,
        maximize: Bool,
        target: StaticString,
    ](
        param: MutableInputTensor[dtype=dtype, rank=rank, ...],
        exp_avg: MutableInputTensor[dtype=dtype, rank=rank, ...],
        exp_avg_sq: MutableInputTensor[dtype=dtype, rank=rank, ...],
        grad: InputTensor[dtype=dtype, rank=rank, ...],
        coefficients: InputTensor[dtype=DType.float32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_adam_step runs on CPU"
        check_float[dtype]()
        _adam_updates[dtype, False, coupled_decay, maximize](
            param.unsafe_ptr(),
            exp_avg.unsafe_ptr(),
            exp_avg_sq.unsafe_ptr(),
            param.unsafe_ptr(),  # no largest second moment: never read
            grad.unsafe_ptr(),
            coefficients.unsafe_ptr(),
            param.size(),
        )


@extensibility.register("torch_max_backend_adam_amsgrad_step")
struct AdamAmsgradStep:
    """AdamStep's update with amsgrad: the second moment divides through
    the largest one so far, kept in `max_exp_avg_sq`:

        max_exp_avg_sq = maximum(max_exp_avg_sq, exp_avg_sq)
        param          = param * decay + exp_avg / (sqrt(max_exp_avg_sq) / a + b)
    """

    @staticmethod
    def execute[
        dtype: DType,
        rank: Int,
        //,
        coupled_decay: Bool,
        maximize: Bool,
        target: StaticString,
    ](
        param: MutableInputTensor[dtype=dtype, rank=rank, ...],
        exp_avg: MutableInputTensor[dtype=dtype, rank=rank, ...],
        exp_avg_sq: MutableInputTensor[dtype=dtype, rank=rank, ...],
        max_exp_avg_sq: MutableInputTensor[dtype=dtype, rank=rank, ...],
        grad: InputTensor[dtype=dtype, rank=rank, ...],
        coefficients: InputTensor[dtype=DType.float32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert (
            target == "cpu"
        ), "torch_max_backend_adam_amsgrad_step runs on CPU"
        check_float[dtype]()
        _adam_updates[dtype, True, coupled_decay, maximize](
            param.unsafe_ptr(),
            exp_avg.unsafe_ptr(),
            exp_avg_sq.unsafe_ptr(),
            max_exp_avg_sq.unsafe_ptr(),
            grad.unsafe_ptr(),
            coefficients.unsafe_ptr(),
            param.size(),
        )

