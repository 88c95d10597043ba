# Depthwise convolutions over a channels-last image, one channel's window at
# a time in vectors of channels. MAX 26.7's grouped conv2d ran them 10-40x
# slower than eager on the CPU (AMD EPYC Zen 3: a 7x7 layer over [1, 384,
# 14, 14] 10.7 ms against 0.26); every output pixel here is its window's
# kh * kw products of a channel vector by the filter's, summed in float32.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.memory import stack_allocation
from std.sys import simd_width_of

from .taps import ACC, end_tap, first_tap

# Output pixels of a row computed together where their windows lie inside
# the image across: each filter vector read once for all of them.
comptime _BLOCK = 4


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
            var i_lo = first_tap(top, dh, kh)
            var i_hi = end_tap(top, dh, kh, height, i_lo)
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
                var j_lo = first_tap(left, dw, kw)
                var j_hi = end_tap(left, dw, kw, width, j_lo)
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
