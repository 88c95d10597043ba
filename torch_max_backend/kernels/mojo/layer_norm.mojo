# A training layer norm's forward in one kernel: the normalized rows with
# their mean and rstd, which the backward reads. Composed from MAX ops it is
# two reductions per row and the elementwise work around them, kernels MAX
# compiles one by one (25 chained layer norms: 173 s composed against 41 s
# as MAX's LayerNorm op, which returns no statistics).

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv, sqrt
from std.sys import simd_width_of
from std.sys.info import num_physical_cores

comptime f32 = DType.float32
comptime _WIDTH = simd_width_of[f32]()
# Values of [rows, D] one task takes at the least: small inputs in few tasks.
comptime _MIN_TASK_VALUES = 16384


@extensibility.register("torch_max_backend_layer_norm")
struct LayerNorm:
    """y = (x - mean) * rstd * weight + bias over the last axis of `x`
    [R, D], with mean and rstd = 1 / sqrt(var + eps) per row (the biased
    variance, as torch's native_layer_norm), `eps` a one-value tensor.

    Two passes over each row for the statistics (the mean, then the squares
    of the centred values, as accurate as torch's), a third writes the row.
    Tasks take blocks of rows. Float32."""

    @staticmethod
    def execute[
        target: StaticString
    ](
        y: OutputTensor[dtype=f32, rank=2, ...],
        mean: OutputTensor[dtype=f32, rank=1, ...],
        rstd: OutputTensor[dtype=f32, rank=1, ...],
        x: InputTensor[dtype=f32, rank=2, ...],
        weight: InputTensor[dtype=f32, rank=1, ...],
        bias: InputTensor[dtype=f32, rank=1, ...],
        eps: InputTensor[dtype=f32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_layer_norm runs on CPU"
        var rows = x.dim_size(0)
        var d_len = x.dim_size(1)
        var xp = x.unsafe_ptr()
        var yp = y.unsafe_ptr()
        var mp = mean.unsafe_ptr()
        var rp = rstd.unsafe_ptr()
        var wp = weight.unsafe_ptr()
        var bp = bias.unsafe_ptr()
        var epsilon = eps.unsafe_ptr().unsafe_load()
        var by_size = ceildiv(rows * d_len, _MIN_TASK_VALUES)
        var tasks = max(1, min(rows, min(by_size, 4 * num_physical_cores())))
        var block = ceildiv(rows, tasks)
        var inv_d = 1 / Scalar[f32](d_len)

        def row_block(task: Int) {var}:
            for r in range(task * block, min(rows, (task + 1) * block)):
                var at = r * d_len
                var s = SIMD[f32, _WIDTH](0)
                var t = Scalar[f32](0)
                var d = 0
                while d + _WIDTH <= d_len:
                    s += xp.unsafe_offset(at + d).unsafe_load[width=_WIDTH]()
                    d += _WIDTH
                while d < d_len:
                    t += xp.unsafe_offset(at + d).unsafe_load()
                    d += 1
                var mu = (s.reduce_add() + t) * inv_d
                var q = SIMD[f32, _WIDTH](0)
                var u = Scalar[f32](0)
                d = 0
                while d + _WIDTH <= d_len:
                    var c = xp.unsafe_offset(at + d).unsafe_load[width=_WIDTH]() - mu
                    q += c * c
                    d += _WIDTH
                while d < d_len:
                    var c = xp.unsafe_offset(at + d).unsafe_load() - mu
                    u += c * c
                    d += 1
                var rs = 1 / sqrt((q.reduce_add() + u) * inv_d + epsilon)
                # torch's running moments give a NaN mean wherever the
                # variance is NaN (a row holding NaN or an infinity), where
                # the plain mean of a row with an infinity is infinite.
                mp.unsafe_offset(r).unsafe_store(rs if rs != rs else mu)
                rp.unsafe_offset(r).unsafe_store(rs)
                d = 0
                while d + _WIDTH <= d_len:
                    var c = xp.unsafe_offset(at + d).unsafe_load[width=_WIDTH]() - mu
                    yp.unsafe_offset(at + d).unsafe_store(
                        c * rs * wp.unsafe_offset(d).unsafe_load[width=_WIDTH]()
                        + bp.unsafe_offset(d).unsafe_load[width=_WIDTH]()
                    )
                    d += _WIDTH
                while d < d_len:
                    var c = xp.unsafe_offset(at + d).unsafe_load() - mu
                    yp.unsafe_offset(at + d).unsafe_store(
                        c * rs * wp.unsafe_offset(d).unsafe_load()
                        + bp.unsafe_offset(d).unsafe_load()
                    )
                    d += 1

        if tasks == 1:
            row_block(0)
        else:
            parallelize(row_block, tasks)
