# A layer norm's backward in one kernel. Composed from MAX ops it is four
# reductions (two means per row for the input's gradient, two sums over the
# rows for the weight's and the bias's), each a kernel MAX compiles on its
# own, with the elementwise work between them: every transformer layer's
# backward holds two of these.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.sys.info import num_physical_cores

comptime f32 = DType.float32
comptime _WIDTH = simd_width_of[f32]()
# Values of [rows, D] one task takes at the least: small inputs in few tasks.
comptime _MIN_TASK_VALUES = 16384


@extensibility.register("torch_max_backend_layer_norm_backward")
struct LayerNormBackward:
    """The gradients of y = (x - mean) * rstd * weight + bias over the last
    axis of `x` [R, D], as torch's native_layer_norm_backward computes them
    (per row r, with xhat = (x - mean[r]) * rstd[r] and gw = grad * weight):

        grad_input  = rstd[r] * (gw - mean(gw) - xhat * mean(gw * xhat))
        grad_weight = sum over rows of grad * xhat,  grad_bias = sum of grad

    Each task takes a block of rows and keeps its own column sums, added up
    once every task is done. Float32."""

    @staticmethod
    def execute[
        target: StaticString
    ](
        grad_input: OutputTensor[dtype=f32, rank=2, ...],
        grad_weight: OutputTensor[dtype=f32, rank=1, ...],
        grad_bias: OutputTensor[dtype=f32, rank=1, ...],
        grad: InputTensor[dtype=f32, rank=2, ...],
        x: InputTensor[dtype=f32, rank=2, ...],
        mean: InputTensor[dtype=f32, rank=1, ...],
        rstd: InputTensor[dtype=f32, rank=1, ...],
        weight: InputTensor[dtype=f32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_layer_norm_backward runs on CPU"
        var rows = x.dim_size(0)
        var d_len = x.dim_size(1)
        var gp = grad.unsafe_ptr()
        var xp = x.unsafe_ptr()
        var out = grad_input.unsafe_ptr()
        var mp = mean.unsafe_ptr()
        var rp = rstd.unsafe_ptr()
        var wp = weight.unsafe_ptr()
        var by_size = ceildiv(rows * d_len, _MIN_TASK_VALUES)
        var tasks = max(1, min(rows, min(by_size, 4 * num_physical_cores())))
        var block = ceildiv(rows, tasks)
        # [task, 2, D]: each task's column sums of grad * xhat, then of grad.
        var partial = unsafe_alloc[Scalar[f32]](tasks * 2 * d_len)
        var inv_d = 1 / Scalar[f32](d_len)

        def row_block(task: Int) {var}:
            var w_total = partial.unsafe_offset(task * 2 * d_len)
            var b_total = w_total.unsafe_offset(d_len)
            for i in range(2 * d_len):
                w_total.unsafe_offset(i).unsafe_store(0)
            for r in range(task * block, min(rows, (task + 1) * block)):
                var at = r * d_len
                var mu = mp.unsafe_offset(r).unsafe_load()
                var rs = rp.unsafe_offset(r).unsafe_load()
                var s1 = SIMD[f32, _WIDTH](0)
                var s2 = SIMD[f32, _WIDTH](0)
                var t1 = Scalar[f32](0)
                var t2 = Scalar[f32](0)
                var d = 0
                while d + _WIDTH <= d_len:
                    var g = gp.unsafe_offset(at + d).unsafe_load[width=_WIDTH]()
                    var xhat = (
                        xp.unsafe_offset(at + d).unsafe_load[width=_WIDTH]() - mu
                    ) * rs
                    var gw = g * wp.unsafe_offset(d).unsafe_load[width=_WIDTH]()
                    s1 += gw
                    s2 += gw * xhat
                    w_total.unsafe_offset(d).unsafe_store(
                        w_total.unsafe_offset(d).unsafe_load[width=_WIDTH]() + g * xhat
                    )
                    b_total.unsafe_offset(d).unsafe_store(
                        b_total.unsafe_offset(d).unsafe_load[width=_WIDTH]() + g
                    )
                    d += _WIDTH
                while d < d_len:
                    var g = gp.unsafe_offset(at + d).unsafe_load()
                    var xhat = (xp.unsafe_offset(at + d).unsafe_load() - mu) * rs
                    var gw = g * wp.unsafe_offset(d).unsafe_load()
                    t1 += gw
                    t2 += gw * xhat
                    w_total.unsafe_offset(d).unsafe_store(
                        w_total.unsafe_offset(d).unsafe_load() + g * xhat
                    )
                    b_total.unsafe_offset(d).unsafe_store(
                        b_total.unsafe_offset(d).unsafe_load() + g
                    )
                    d += 1
                var mean_gw = (s1.reduce_add() + t1) * inv_d
                var mean_gwx = (s2.reduce_add() + t2) * inv_d
                d = 0
                while d + _WIDTH <= d_len:
                    var g = gp.unsafe_offset(at + d).unsafe_load[width=_WIDTH]()
                    var xhat = (
                        xp.unsafe_offset(at + d).unsafe_load[width=_WIDTH]() - mu
                    ) * rs
                    var gw = g * wp.unsafe_offset(d).unsafe_load[width=_WIDTH]()
                    out.unsafe_offset(at + d).unsafe_store(
                        (gw - mean_gw - xhat * mean_gwx) * rs
                    )
                    d += _WIDTH
                while d < d_len:
                    var g = gp.unsafe_offset(at + d).unsafe_load()
                    var xhat = (xp.unsafe_offset(at + d).unsafe_load() - mu) * rs
                    var gw = g * wp.unsafe_offset(d).unsafe_load()
                    out.unsafe_offset(at + d).unsafe_store(
                        (gw - mean_gw - xhat * mean_gwx) * rs
                    )
                    d += 1

        if tasks == 1:
            row_block(0)
        else:
            parallelize(row_block, tasks)
        var gwp = grad_weight.unsafe_ptr()
        var gbp = grad_bias.unsafe_ptr()
        for d in range(d_len):
            var w_sum = Scalar[f32](0)
            var b_sum = Scalar[f32](0)
            for task in range(tasks):
                w_sum += partial.unsafe_offset(task * 2 * d_len + d).unsafe_load()
                b_sum += partial.unsafe_offset(task * 2 * d_len + d_len + d).unsafe_load()
            gwp.unsafe_offset(d).unsafe_store(w_sum)
            gbp.unsafe_offset(d).unsafe_store(b_sum)
        partial.unsafe_free()
