# A training batch norm's statistics and its backward, one kernel each. Built
# from MAX ops, a batch norm's forward took two to three reductions (a mean
# and a sum of squares, each over N and then H * W unless the layout merges
# them) and its backward four (the gradient's sum and its dot product with
# the centred input, each over two axes), every one a kernel MAX compiles on
# its own: a small MobileNetV2's 52 batch norms held about 350 of its
# training step's reductions.
#
# Both kernels see the input as [A, C, B]: an NCHW tensor as [N, C, H * W],
# channels-last rows as [N * H * W, C, 1], a [C, N * H * W] product as
# [1, C, N * H * W]. With B > 1 each task owns a channel and reads its runs
# of B values; with B == 1 each task owns a block of rows and keeps partial
# sums per channel, added up once every task is done.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv, sqrt
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.sys.info import num_physical_cores

comptime f32 = DType.float32
comptime _WIDTH = simd_width_of[f32]()
# Rows of [rows, C] one task sums at the least: fewer tasks for small inputs,
# whose parallel dispatch would cost more than the sums.
comptime _MIN_TASK_VALUES = 16384


def _row_tasks(rows: Int, channels: Int) -> Int:
    """How many blocks of rows a [rows, C] input is summed in."""
    var by_size = ceildiv(rows * channels, _MIN_TASK_VALUES)
    return max(1, min(rows, min(by_size, 4 * num_physical_cores())))


@extensibility.register("torch_max_backend_batch_norm_stats")
struct BatchNormStats:
    """Per channel of `x` [A, C, B]: the mean, rstd = 1 / sqrt(biased
    variance + eps), and the running statistics updated as torch's
    decomposition writes them: momentum * batch + (1 - momentum) * running,
    the variance unbiased (times n / (n - 1)). `coefficients` = [eps,
    momentum]. Two passes (the mean, then squares about it), in float32."""

    @staticmethod
    def execute[
        target: StaticString
    ](
        mean: OutputTensor[dtype=f32, rank=1, ...],
        rstd: OutputTensor[dtype=f32, rank=1, ...],
        new_running_mean: OutputTensor[dtype=f32, rank=1, ...],
        new_running_var: OutputTensor[dtype=f32, rank=1, ...],
        x: InputTensor[dtype=f32, rank=3, ...],
        running_mean: InputTensor[dtype=f32, rank=1, ...],
        running_var: InputTensor[dtype=f32, rank=1, ...],
        coefficients: InputTensor[dtype=f32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_batch_norm_stats runs on CPU"
        var a_len = x.dim_size(0)
        var channels = x.dim_size(1)
        var b_len = x.dim_size(2)
        var count = a_len * b_len
        var xp = x.unsafe_ptr()
        var means = mean.unsafe_ptr()
        var squares = unsafe_alloc[Scalar[f32]](channels)

        if b_len > 1:

            def channel(c: Int) {var}:
                var lanes = SIMD[f32, _WIDTH](0)
                var tail = Scalar[f32](0)
                for a in range(a_len):
                    var run = xp.unsafe_offset((a * channels + c) * b_len)
                    var b = 0
                    while b + _WIDTH <= b_len:
                        lanes += run.unsafe_offset(b).unsafe_load[width=_WIDTH]()
                        b += _WIDTH
                    while b < b_len:
                        tail += run.unsafe_offset(b).unsafe_load()
                        b += 1
                var mu = (lanes.reduce_add() + tail) / Scalar[f32](count)
                lanes = SIMD[f32, _WIDTH](0)
                tail = 0
                for a in range(a_len):
                    var run = xp.unsafe_offset((a * channels + c) * b_len)
                    var b = 0
                    while b + _WIDTH <= b_len:
                        var d = run.unsafe_offset(b).unsafe_load[width=_WIDTH]() - mu
                        lanes += d * d
                        b += _WIDTH
                    while b < b_len:
                        var d = run.unsafe_offset(b).unsafe_load() - mu
                        tail += d * d
                        b += 1
                means.unsafe_offset(c).unsafe_store(mu)
                squares.unsafe_offset(c).unsafe_store(lanes.reduce_add() + tail)

            parallelize(channel, channels)
        else:
            var tasks = _row_tasks(a_len, channels)
            var block = ceildiv(a_len, tasks)
            var partial = unsafe_alloc[Scalar[f32]](tasks * channels)

            def row_sums(task: Int) {var}:
                var total = partial.unsafe_offset(task * channels)
                for c in range(channels):
                    total.unsafe_offset(c).unsafe_store(0)
                for a in range(task * block, min(a_len, (task + 1) * block)):
                    var run = xp.unsafe_offset(a * channels)
                    var c = 0
                    while c + _WIDTH <= channels:
                        total.unsafe_offset(c).unsafe_store(
                            total.unsafe_offset(c).unsafe_load[width=_WIDTH]()
                            + run.unsafe_offset(c).unsafe_load[width=_WIDTH]()
                        )
                        c += _WIDTH
                    while c < channels:
                        total.unsafe_offset(c).unsafe_store(
                            total.unsafe_offset(c).unsafe_load()
                            + run.unsafe_offset(c).unsafe_load()
                        )
                        c += 1

            parallelize(row_sums, tasks)
            for c in range(channels):
                var s = Scalar[f32](0)
                for task in range(tasks):
                    s += partial.unsafe_offset(task * channels + c).unsafe_load()
                means.unsafe_offset(c).unsafe_store(s / Scalar[f32](count))

            def row_squares(task: Int) {var}:
                var total = partial.unsafe_offset(task * channels)
                for c in range(channels):
                    total.unsafe_offset(c).unsafe_store(0)
                for a in range(task * block, min(a_len, (task + 1) * block)):
                    var run = xp.unsafe_offset(a * channels)
                    var c = 0
                    while c + _WIDTH <= channels:
                        var d = run.unsafe_offset(c).unsafe_load[
                            width=_WIDTH
                        ]() - means.unsafe_offset(c).unsafe_load[width=_WIDTH]()
                        total.unsafe_offset(c).unsafe_store(
                            total.unsafe_offset(c).unsafe_load[width=_WIDTH]() + d * d
                        )
                        c += _WIDTH
                    while c < channels:
                        var d = run.unsafe_offset(c).unsafe_load() - means.unsafe_offset(
                            c
                        ).unsafe_load()
                        total.unsafe_offset(c).unsafe_store(
                            total.unsafe_offset(c).unsafe_load() + d * d
                        )
                        c += 1

            parallelize(row_squares, tasks)
            for c in range(channels):
                var s = Scalar[f32](0)
                for task in range(tasks):
                    s += partial.unsafe_offset(task * channels + c).unsafe_load()
                squares.unsafe_offset(c).unsafe_store(s)
            partial.unsafe_free()

        var eps = coefficients.unsafe_ptr().unsafe_offset(0).unsafe_load()
        var momentum = coefficients.unsafe_ptr().unsafe_offset(1).unsafe_load()
        var n = Scalar[f32](count)
        var unbias = n / Scalar[f32](max(count - 1, 1))
        for c in range(channels):
            var mu = means.unsafe_offset(c).unsafe_load()
            var variance = squares.unsafe_offset(c).unsafe_load() / n
            rstd.unsafe_ptr().unsafe_offset(c).unsafe_store(1 / sqrt(variance + eps))
            var rm = running_mean.unsafe_ptr().unsafe_offset(c).unsafe_load()
            var rv = running_var.unsafe_ptr().unsafe_offset(c).unsafe_load()
            new_running_mean.unsafe_ptr().unsafe_offset(c).unsafe_store(
                momentum * mu + (1 - momentum) * rm
            )
            new_running_var.unsafe_ptr().unsafe_offset(c).unsafe_store(
                momentum * (variance * unbias) + (1 - momentum) * rv
            )
        squares.unsafe_free()


@extensibility.register("torch_max_backend_batch_norm_backward")
struct BatchNormBackward:
    """A training batch norm's gradients, as torch's decomposition of
    native_batch_norm_backward writes them, per channel c of `grad` and `x`
    ([A, C, B] both; n = A * B):

        sum_g  = sum of grad,  dot = sum of grad * (x - mean)
        grad_input  = (grad - sum_g / n - (x - mean) * dot / n * rstd^2) * rstd * weight
        grad_weight = dot * rstd,  grad_bias = sum_g

    `grad_input` is laid out as `x`. Float32."""

    @staticmethod
    def execute[
        target: StaticString
    ](
        grad_input: OutputTensor[dtype=f32, rank=3, ...],
        grad_weight: OutputTensor[dtype=f32, rank=1, ...],
        grad_bias: OutputTensor[dtype=f32, rank=1, ...],
        grad: InputTensor[dtype=f32, rank=3, ...],
        x: InputTensor[dtype=f32, rank=3, ...],
        mean: InputTensor[dtype=f32, rank=1, ...],
        rstd: InputTensor[dtype=f32, rank=1, ...],
        weight: InputTensor[dtype=f32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_batch_norm_backward runs on CPU"
        var a_len = x.dim_size(0)
        var channels = x.dim_size(1)
        var b_len = x.dim_size(2)
        var n = Scalar[f32](a_len * b_len)
        var gp = grad.unsafe_ptr()
        var xp = x.unsafe_ptr()
        var out = grad_input.unsafe_ptr()
        var mp = mean.unsafe_ptr()
        var rp = rstd.unsafe_ptr()
        var wp = weight.unsafe_ptr()
        var sums = grad_bias.unsafe_ptr()
        var dots = unsafe_alloc[Scalar[f32]](channels)
        # Per channel: grad_input = grad * scale - (x - mean) * proj - shift.
        var scale = unsafe_alloc[Scalar[f32]](channels)
        var proj = unsafe_alloc[Scalar[f32]](channels)
        var shift = unsafe_alloc[Scalar[f32]](channels)

        @always_inline
        def coefficients(c: Int) {var}:
            var r = rp.unsafe_offset(c).unsafe_load()
            var s = r * wp.unsafe_offset(c).unsafe_load()
            var dot = dots.unsafe_offset(c).unsafe_load()
            scale.unsafe_offset(c).unsafe_store(s)
            proj.unsafe_offset(c).unsafe_store(dot / n * r * r * s)
            shift.unsafe_offset(c).unsafe_store(sums.unsafe_offset(c).unsafe_load() / n * s)
            grad_weight.unsafe_ptr().unsafe_offset(c).unsafe_store(dot * r)

        if b_len > 1:

            def channel(c: Int) {var}:
                var mu = mp.unsafe_offset(c).unsafe_load()
                var g_lanes = SIMD[f32, _WIDTH](0)
                var d_lanes = SIMD[f32, _WIDTH](0)
                var g_tail = Scalar[f32](0)
                var d_tail = Scalar[f32](0)
                for a in range(a_len):
                    var at = (a * channels + c) * b_len
                    var b = 0
                    while b + _WIDTH <= b_len:
                        var g = gp.unsafe_offset(at + b).unsafe_load[width=_WIDTH]()
                        g_lanes += g
                        d_lanes += g * (
                            xp.unsafe_offset(at + b).unsafe_load[width=_WIDTH]() - mu
                        )
                        b += _WIDTH
                    while b < b_len:
                        var g = gp.unsafe_offset(at + b).unsafe_load()
                        g_tail += g
                        d_tail += g * (xp.unsafe_offset(at + b).unsafe_load() - mu)
                        b += 1
                sums.unsafe_offset(c).unsafe_store(g_lanes.reduce_add() + g_tail)
                dots.unsafe_offset(c).unsafe_store(d_lanes.reduce_add() + d_tail)
                coefficients(c)
                var s = scale.unsafe_offset(c).unsafe_load()
                var p = proj.unsafe_offset(c).unsafe_load()
                var t = shift.unsafe_offset(c).unsafe_load()
                for a in range(a_len):
                    var at = (a * channels + c) * b_len
                    var b = 0
                    while b + _WIDTH <= b_len:
                        var g = gp.unsafe_offset(at + b).unsafe_load[width=_WIDTH]()
                        var d = xp.unsafe_offset(at + b).unsafe_load[width=_WIDTH]() - mu
                        out.unsafe_offset(at + b).unsafe_store(g * s - d * p - t)
                        b += _WIDTH
                    while b < b_len:
                        var g = gp.unsafe_offset(at + b).unsafe_load()
                        var d = xp.unsafe_offset(at + b).unsafe_load() - mu
                        out.unsafe_offset(at + b).unsafe_store(g * s - d * p - t)
                        b += 1

            parallelize(channel, channels)
        else:
            var tasks = _row_tasks(a_len, channels)
            var block = ceildiv(a_len, tasks)
            # [task, 2, C]: each task's sums of grad, then of grad * (x - mean).
            var partial = unsafe_alloc[Scalar[f32]](tasks * 2 * channels)

            def row_sums(task: Int) {var}:
                var g_total = partial.unsafe_offset(task * 2 * channels)
                var d_total = g_total.unsafe_offset(channels)
                for c in range(2 * channels):
                    g_total.unsafe_offset(c).unsafe_store(0)
                for a in range(task * block, min(a_len, (task + 1) * block)):
                    var at = a * channels
                    var c = 0
                    while c + _WIDTH <= channels:
                        var g = gp.unsafe_offset(at + c).unsafe_load[width=_WIDTH]()
                        var d = xp.unsafe_offset(at + c).unsafe_load[
                            width=_WIDTH
                        ]() - mp.unsafe_offset(c).unsafe_load[width=_WIDTH]()
                        g_total.unsafe_offset(c).unsafe_store(
                            g_total.unsafe_offset(c).unsafe_load[width=_WIDTH]() + g
                        )
                        d_total.unsafe_offset(c).unsafe_store(
                            d_total.unsafe_offset(c).unsafe_load[width=_WIDTH]() + g * d
                        )
                        c += _WIDTH
                    while c < channels:
                        var g = gp.unsafe_offset(at + c).unsafe_load()
                        var d = xp.unsafe_offset(at + c).unsafe_load() - mp.unsafe_offset(
                            c
                        ).unsafe_load()
                        g_total.unsafe_offset(c).unsafe_store(
                            g_total.unsafe_offset(c).unsafe_load() + g
                        )
                        d_total.unsafe_offset(c).unsafe_store(
                            d_total.unsafe_offset(c).unsafe_load() + g * d
                        )
                        c += 1

            parallelize(row_sums, tasks)
            for c in range(channels):
                var g_sum = Scalar[f32](0)
                var d_sum = Scalar[f32](0)
                for task in range(tasks):
                    g_sum += partial.unsafe_offset(task * 2 * channels + c).unsafe_load()
                    d_sum += partial.unsafe_offset(
                        task * 2 * channels + channels + c
                    ).unsafe_load()
                sums.unsafe_offset(c).unsafe_store(g_sum)
                dots.unsafe_offset(c).unsafe_store(d_sum)
                coefficients(c)
            partial.unsafe_free()

            def row_grads(task: Int) {var}:
                for a in range(task * block, min(a_len, (task + 1) * block)):
                    var at = a * channels
                    var c = 0
                    while c + _WIDTH <= channels:
                        var g = gp.unsafe_offset(at + c).unsafe_load[width=_WIDTH]()
                        var d = xp.unsafe_offset(at + c).unsafe_load[
                            width=_WIDTH
                        ]() - mp.unsafe_offset(c).unsafe_load[width=_WIDTH]()
                        out.unsafe_offset(at + c).unsafe_store(
                            g * scale.unsafe_offset(c).unsafe_load[width=_WIDTH]()
                            - d * proj.unsafe_offset(c).unsafe_load[width=_WIDTH]()
                            - shift.unsafe_offset(c).unsafe_load[width=_WIDTH]()
                        )
                        c += _WIDTH
                    while c < channels:
                        var g = gp.unsafe_offset(at + c).unsafe_load()
                        var d = xp.unsafe_offset(at + c).unsafe_load() - mp.unsafe_offset(
                            c
                        ).unsafe_load()
                        out.unsafe_offset(at + c).unsafe_store(
                            g * scale.unsafe_offset(c).unsafe_load()
                            - d * proj.unsafe_offset(c).unsafe_load()
                            - shift.unsafe_offset(c).unsafe_load()
                        )
                        c += 1

            parallelize(row_grads, tasks)
        dots.unsafe_free()
        scale.unsafe_free()
        proj.unsafe_free()
        shift.unsafe_free()
