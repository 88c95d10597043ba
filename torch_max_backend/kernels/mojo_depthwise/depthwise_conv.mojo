# Depthwise convolutions over a channels-last image, one channel's window at
# a time in vectors of channels. MAX 26.7's grouped conv2d ran them 10-40x
# slower than eager on the CPU (AMD EPYC Zen 3: a 7x7 layer over [1, 384,
# 14, 14] 10.7 ms against 0.26); every output pixel here is its window's
# kh * kw products of a channel vector by the filter's, summed in float32.
# The input gradient is the same window sum taken from the other side: each
# input pixel gathers the output pixels whose windows read it, so no two
# tasks write one value.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.memory import stack_allocation
from std.sys import simd_width_of


comptime ACC = DType.float32
# Output pixels of a row computed together where their windows lie inside
# the image across: each filter vector read once for all of them.
comptime _BLOCK = 4


@always_inline
def _first_tap(start: Int, step: Int, taps: Int) -> Int:
    """The first tap t < taps whose position start + t * step is >= 0."""
    var t = 0
    while t < taps and start + t * step < 0:
        t += 1
    return t


@always_inline
def _end_tap(start: Int, step: Int, taps: Int, size: Int, first: Int) -> Int:
    """One past the last tap whose position start + t * step is < size."""
    var t = taps
    while t > first and start + (t - 1) * step >= size:
        t -= 1
    return t


@always_inline
def _window_sum[
    dtype: DType, //, lanes: Int, kw: Int, dh: Int, dw: Int
](
    image: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    taps: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    row_stride: Int,
    channels: Int,
    i_lo: Int,
    i_hi: Int,
    j_lo: Int,
    j_hi: Int,
) -> SIMD[ACC, lanes]:
    """The sum over kernel rows [i_lo, i_hi) and columns [j_lo, j_hi) of
    image[i * dh, j * dw] * taps[i, j] for `lanes` channels: `image` points
    at the window's top-left pixel (tap 0, 0), `taps` at the filter's [kh,
    kw, C] entry (0, 0) of the same channels."""
    var total = SIMD[ACC, lanes](0)
    for i in range(i_lo, i_hi):
        var pixels = image.unsafe_offset(i * dh * row_stride)
        var weights = taps.unsafe_offset(i * kw * channels)
        for j in range(j_lo, j_hi):
            var v = pixels.unsafe_offset(j * dw * channels).unsafe_load[width=lanes]()
            var w = weights.unsafe_offset(j * channels).unsafe_load[width=lanes]()
            total += v.cast[ACC]() * w.cast[ACC]()
    return total


@always_inline
def _pixels_sums[
    dtype: DType, //, lanes: Int, count: Int, kw: Int, sw: Int, dh: Int, dw: Int
](
    image: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    taps: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    bias: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    dst: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    row_stride: Int,
    channels: Int,
    i_lo: Int,
    i_hi: Int,
):
    """`count` adjacent output pixels of one row, `lanes` channels, whose
    windows lie inside the image across: each tap's filter vector is read
    once for all of them. `image` points at the first pixel's window tap
    (0, 0), `dst` at its output."""
    var acc = stack_allocation[count * lanes, ACC]()
    var start = bias.unsafe_load[width=lanes]().cast[ACC]()
    comptime for p in range(count):
        acc.unsafe_offset(p * lanes).unsafe_store(start)
    for i in range(i_lo, i_hi):
        var pixels = image.unsafe_offset(i * dh * row_stride)
        var weights = taps.unsafe_offset(i * kw * channels)
        comptime for j in range(kw):
            var w = weights.unsafe_offset(j * channels).unsafe_load[width=lanes]()
            comptime for p in range(count):
                var v = pixels.unsafe_offset((p * sw + j * dw) * channels).unsafe_load[
                    width=lanes
                ]()
                var a = acc.unsafe_offset(p * lanes)
                a.unsafe_store(
                    a.unsafe_load[width=lanes]() + v.cast[ACC]() * w.cast[ACC]()
                )
    comptime for p in range(count):
        dst.unsafe_offset(p * channels).unsafe_store(
            acc.unsafe_offset(p * lanes).unsafe_load[width=lanes]().cast[dtype]()
        )


@extensibility.register("torch_max_backend_depthwise_conv")
struct DepthwiseConv:
    """`output[n, oh, ow, c]` = `bias[c]` + the sum over the window of
    `x[n, oh * sh - ph + i * dh, ow * sw - pw + j * dw, c] * filters[i, j,
    c]`, pixels in the padding adding nothing. `x` is (N, H, W, C), the
    output (N, out_h, out_w, C) with torch's sizes (the lowering gives
    them), `filters` [kh, kw, C]. CPU only.
    """

    @staticmethod
    def execute[
        dtype: DType,
        //,
        kh: Int,
        kw: Int,
        sh: Int,
        sw: Int,
        ph: Int,
        pw: Int,
        dh: Int,
        dw: Int,
        target: StaticString,
    ](
        output: OutputTensor[dtype=dtype, rank=4, ...],
        x: InputTensor[dtype=dtype, rank=4, ...],
        filters: InputTensor[dtype=dtype, rank=3, ...],
        bias: InputTensor[dtype=dtype, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_depthwise_conv runs on CPU"
        comptime lanes = simd_width_of[ACC]()
        var height = x.dim_size(1)
        var width = x.dim_size(2)
        var channels = x.dim_size(3)
        var out_h = output.dim_size(1)
        var out_w = output.dim_size(2)
        var xp = x.unsafe_ptr()
        var fp = filters.unsafe_ptr()
        var bp = bias.unsafe_ptr()
        var op = output.unsafe_ptr()
        var row_stride = width * channels

        # The output columns whose windows lie inside the image across.
        var inner_lo = min(out_w, (pw + sw - 1) // sw)
        var inner_hi = max(inner_lo, min(out_w, (width - 1 - (kw - 1) * dw + pw) // sw + 1))

        # One task per output row of one image.
        def row(task: Int) {var}:
            var n = task // out_h
            var top = (task % out_h) * sh - ph
            var i_lo = _first_tap(top, dh, kh)
            var i_hi = _end_tap(top, dh, kh, height, i_lo)
            var ow = 0
            while ow < out_w:
                var left = ow * sw - pw
                # The window's tap (0, 0), which may lie in the padding:
                # only taps inside the image are read.
                var corner = ((n * height + top) * width + left) * channels
                var dst = op.unsafe_offset((task * out_w + ow) * channels)
                if ow >= inner_lo and ow + _BLOCK <= inner_hi:
                    var c = 0
                    while c + lanes <= channels:
                        _pixels_sums[lanes, _BLOCK, kw, sw, dh, dw](
                            xp.unsafe_offset(corner + c), fp.unsafe_offset(c),
                            bp.unsafe_offset(c), dst.unsafe_offset(c),
                            row_stride, channels, i_lo, i_hi,
                        )
                        c += lanes
                    while c < channels:
                        _pixels_sums[1, _BLOCK, kw, sw, dh, dw](
                            xp.unsafe_offset(corner + c), fp.unsafe_offset(c),
                            bp.unsafe_offset(c), dst.unsafe_offset(c),
                            row_stride, channels, i_lo, i_hi,
                        )
                        c += 1
                    ow += _BLOCK
                    continue
                var j_lo = _first_tap(left, dw, kw)
                var j_hi = _end_tap(left, dw, kw, width, j_lo)
                var c = 0
                while c + lanes <= channels:
                    var total = _window_sum[lanes, kw, dh, dw](
                        xp.unsafe_offset(corner + c),
                        fp.unsafe_offset(c),
                        row_stride, channels, i_lo, i_hi, j_lo, j_hi,
                    )
                    total += bp.unsafe_offset(c).unsafe_load[width=lanes]().cast[ACC]()
                    dst.unsafe_offset(c).unsafe_store(total.cast[dtype]())
                    c += lanes
                while c < channels:
                    var one = _window_sum[1, kw, dh, dw](
                        xp.unsafe_offset(corner + c),
                        fp.unsafe_offset(c),
                        row_stride, channels, i_lo, i_hi, j_lo, j_hi,
                    )
                    one += bp.unsafe_offset(c).unsafe_load().cast[ACC]()
                    dst.unsafe_offset(c).unsafe_store(one.cast[dtype]())
                    c += 1
                ow += 1

        parallelize(row, x.dim_size(0) * out_h)


@always_inline
def _gathered_sum[
    dtype: DType, //, lanes: Int
](
    grad: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    taps: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    grad_at: UnsafePointer[Int, MutUntrackedOrigin],
    tap_at: UnsafePointer[Int, MutUntrackedOrigin],
    count: Int,
) -> SIMD[ACC, lanes]:
    """The sum over k < count of grad[grad_at[k]] * taps[tap_at[k]] for
    `lanes` channels: the output pixels whose windows read one input pixel,
    each by its tap; `grad` and `taps` point at the same channel."""
    var total = SIMD[ACC, lanes](0)
    for k in range(count):
        var g = grad.unsafe_offset(grad_at.unsafe_offset(k).unsafe_load()).unsafe_load[width=lanes]()
        var w = taps.unsafe_offset(tap_at.unsafe_offset(k).unsafe_load()).unsafe_load[width=lanes]()
        total += g.cast[ACC]() * w.cast[ACC]()
    return total


@extensibility.register("torch_max_backend_depthwise_input_grad")
struct DepthwiseInputGrad:
    """The input gradient of that convolution: `output[n, h, w, c]` = the
    sum over the taps (i, j) and output pixels (oh, ow) with oh * sh - ph +
    i * dh = h and ow * sw - pw + j * dw = w of `grad[n, oh, ow, c] *
    filters[i, j, c]`. `grad` is (N, out_h, out_w, C), the output (N, H, W,
    C), `filters` [kh, kw, C]. CPU only.
    """

    @staticmethod
    def execute[
        dtype: DType,
        //,
        kh: Int,
        kw: Int,
        sh: Int,
        sw: Int,
        ph: Int,
        pw: Int,
        dh: Int,
        dw: Int,
        target: StaticString,
    ](
        output: OutputTensor[dtype=dtype, rank=4, ...],
        grad: InputTensor[dtype=dtype, rank=4, ...],
        filters: InputTensor[dtype=dtype, rank=3, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_depthwise_input_grad runs on CPU"
        comptime lanes = simd_width_of[ACC]()
        var out_h = grad.dim_size(1)
        var out_w = grad.dim_size(2)
        var channels = grad.dim_size(3)
        var height = output.dim_size(1)
        var width = output.dim_size(2)
        var gp = grad.unsafe_ptr()
        var fp = filters.unsafe_ptr()
        var op = output.unsafe_ptr()

        # One task per input row of one image.
        def row(task: Int) {var}:
            var n = task // height
            var h = task % height
            var image = gp.unsafe_offset(n * out_h * out_w * channels)
            # Each pixel's readers: where their gradient and tap lie.
            var grad_at = stack_allocation[kh * kw, Int]()
            var tap_at = stack_allocation[kh * kw, Int]()
            for w in range(width):
                var count = 0
                for i in range(kh):
                    var t = h + ph - i * dh
                    if t < 0 or t % sh != 0 or t // sh >= out_h:
                        continue
                    for j in range(kw):
                        var u = w + pw - j * dw
                        if u < 0 or u % sw != 0 or u // sw >= out_w:
                            continue
                        grad_at.unsafe_offset(count).unsafe_store(
                            ((t // sh) * out_w + u // sw) * channels
                        )
                        tap_at.unsafe_offset(count).unsafe_store((i * kw + j) * channels)
                        count += 1
                var dst = op.unsafe_offset((task * width + w) * channels)
                var c = 0
                while c + lanes <= channels:
                    var total = _gathered_sum[lanes](
                        image.unsafe_offset(c), fp.unsafe_offset(c), grad_at, tap_at, count
                    )
                    dst.unsafe_offset(c).unsafe_store(total.cast[dtype]())
                    c += lanes
                while c < channels:
                    var one = _gathered_sum[1](
                        image.unsafe_offset(c), fp.unsafe_offset(c), grad_at, tap_at, count
                    )
                    dst.unsafe_offset(c).unsafe_store(one.cast[dtype]())
                    c += 1

        parallelize(row, grad.dim_size(0) * height)


@always_inline
def _tap_sum[
    dtype: DType, //, lanes: Int, sw: Int, dw: Int
](
    grad: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    rows: Int,
    row_step: Int,
    x_row_step: Int,
    ow_lo: Int,
    ow_hi: Int,
    channels: Int,
) -> SIMD[ACC, lanes]:
    """The sum over `rows` output rows and the columns [ow_lo, ow_hi) of
    grad[r, ow] * x[r, ow * sw + j * dw] for `lanes` channels: `grad`
    points at the first row's output pixel 0, `x` at the input pixel its
    tap reads for output column 0 of that row (which may lie in the
    padding: only columns inside are read)."""
    var total = SIMD[ACC, lanes](0)
    for r in range(rows):
        var g_row = grad.unsafe_offset(r * row_step)
        var x_row = x.unsafe_offset(r * x_row_step)
        for ow in range(ow_lo, ow_hi):
            var g = g_row.unsafe_offset(ow * channels).unsafe_load[width=lanes]()
            var v = x_row.unsafe_offset(ow * sw * channels).unsafe_load[width=lanes]()
            total += g.cast[ACC]() * v.cast[ACC]()
    return total


@extensibility.register("torch_max_backend_depthwise_weight_grad_last")
struct DepthwiseWeightGradLast:
    """The weight gradient of that convolution, [kh, kw, C]: `output[i, j,
    c]` = the sum over images n and output pixels (oh, ow) of `grad[n, oh,
    ow, c] * x[n, oh * sh - ph + i * dh, ow * sw - pw + j * dw, c]`,
    pixels in the padding adding nothing. `grad` is (N, out_h, out_w, C),
    `x` (N, H, W, C): vectors of channels for every stride, where the
    channels-first kernel (kernels/mojo/depthwise_weight_grad.mojo) reads
    single values but for stride 1. One task per tap and vector of
    channels. CPU only.
    """

    @staticmethod
    def execute[
        dtype: DType,
        //,
        kh: Int,
        kw: Int,
        sh: Int,
        sw: Int,
        ph: Int,
        pw: Int,
        dh: Int,
        dw: Int,
        target: StaticString,
    ](
        output: OutputTensor[dtype=dtype, rank=3, ...],
        grad: InputTensor[dtype=dtype, rank=4, ...],
        x: InputTensor[dtype=dtype, rank=4, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_depthwise_weight_grad_last runs on CPU"
        comptime lanes = simd_width_of[ACC]()
        var batch = grad.dim_size(0)
        var out_h = grad.dim_size(1)
        var out_w = grad.dim_size(2)
        var channels = grad.dim_size(3)
        var height = x.dim_size(1)
        var width = x.dim_size(2)
        var gp = grad.unsafe_ptr()
        var xp = x.unsafe_ptr()
        var op = output.unsafe_ptr()
        var chunks = (channels + lanes - 1) // lanes

        def tap(task: Int) {var}:
            var t = task // chunks
            var c = (task % chunks) * lanes
            var i = t // kw
            var j = t % kw
            # The output rows and columns whose tap (i, j) lies inside.
            var oh_lo = 0
            while oh_lo < out_h and oh_lo * sh - ph + i * dh < 0:
                oh_lo += 1
            var oh_hi = out_h
            while oh_hi > oh_lo and (oh_hi - 1) * sh - ph + i * dh >= height:
                oh_hi -= 1
            var ow_lo = 0
            while ow_lo < out_w and ow_lo * sw - pw + j * dw < 0:
                ow_lo += 1
            var ow_hi = out_w
            while ow_hi > ow_lo and (ow_hi - 1) * sw - pw + j * dw >= width:
                ow_hi -= 1
            var row_step = out_w * channels
            var x_row_step = sh * width * channels
            var total = SIMD[ACC, lanes](0)
            var tail = min(lanes, channels - c)
            for n in range(batch):
                var g0 = gp.unsafe_offset((n * out_h + oh_lo) * row_step + c)
                var x0 = xp.unsafe_offset(
                    ((n * height + oh_lo * sh - ph + i * dh) * width - pw + j * dw)
                    * channels
                    + c
                )
                if tail == lanes:
                    total += _tap_sum[lanes, sw, dw](
                        g0, x0, oh_hi - oh_lo, row_step, x_row_step,
                        ow_lo, ow_hi, channels,
                    )
                else:
                    for k in range(tail):
                        total[k] += _tap_sum[1, sw, dw](
                            g0.unsafe_offset(k), x0.unsafe_offset(k),
                            oh_hi - oh_lo, row_step, x_row_step,
                            ow_lo, ow_hi, channels,
                        )
            var dst = op.unsafe_offset(t * channels + c)
            if tail == lanes:
                dst.unsafe_store(total.cast[dtype]())
            else:
                for k in range(tail):
                    dst.unsafe_offset(k).unsafe_store(total[k].cast[dtype]())

        parallelize(tap, kh * kw * chunks)
