# im2col for convolutions run as a matmul on CPU: one pass over the input
# writes every window. Built from MAX ops (a pad, one strided slice per kernel
# offset, a stack) the same matrix took three times as long (256 channels at
# 14x14, 3x3: 0.64 ms against 0.19 ms), and MAX's ops cannot read a
# channels-last input into this channels-first order without a permute.
# Each window row is a run of one input row, copied with vector loads where
# the input's columns are contiguous (channels first, stride 1): element by
# element through 4-d indices the kernel wrote 0.8-1.5 G floats a second
# (ResNet-18's 64-channel 28x28 weight gradient: 1.1 ms, AMD EPYC Zen 4).

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.sys import simd_width_of

from .window_runs import copy_run, end_inside, first_inside, zero_run



@always_inline
def _shifted_plane[
    dtype: DType, //
](
    dst: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    src: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    out_h: Int,
    out_w: Int,
    shift_h: Int,
    height: Int,
    first: Int,
    last: Int,
):
    """One kernel offset's [out_h, out_w] block of a stride-1 window matrix
    whose rows are as wide as the image's (a "same" padding): the image's
    plane shifted, read from `src` (the plane's start moved by the offset)
    as one run, the rows and columns that fall in the padding zeroed.
    Columns [first, last) of each row lie inside the image. A small plane
    (ResNet-18's 14x14 to 4x4) is one copy instead of rows of a few values."""
    var top = min(out_h, max(0, -shift_h))
    var bottom = max(top, min(out_h, height - shift_h))
    # The run starts and ends inside the image: no read before or after it.
    var lo = top * out_w + first
    var hi = max(lo, bottom * out_w - (out_w - last))
    zero_run(dst, 0, lo)
    copy_run(dst, src, lo, hi)
    zero_run(dst, hi, out_h * out_w)
    # The run also crossed each row's padded columns: zero them again.
    for oh in range(top, bottom):
        for ow in range(first):
            dst.unsafe_offset(oh * out_w + ow).unsafe_store(Scalar[dtype](0))
        for ow in range(last, out_w):
            dst.unsafe_offset(oh * out_w + ow).unsafe_store(Scalar[dtype](0))


@extensibility.register("torch_max_backend_im2col")
struct Im2col:
    """The windows of a 2-d convolution's input as an [N, C * kh * kw, out_h,
    out_w] tensor, a matrix once the last two axes are merged: rows in the
    (c, i, j) order of a [O, C, kh, kw] filter flattened to [O, C * kh * kw];
    zero where a window reaches into the padding.

    With `batch_inner` set the output is [C * kh * kw, N, out_h, out_w]
    instead: the images side by side in each row, so that a weight
    gradient's product contracts over the batch and the pixels at once.

    The input is N, C, H, W, or N, H, W, C when `channels_last` is set. The
    output size comes from the input's at run time (torch's formula), so one
    compiled graph serves inputs of any height and width. CPU only: the
    lowering uses MAX's own convolution kernel on GPUs.
    """

    @staticmethod
    def execute[
        dtype: DType,
        //,
        channels_last: Bool,
        batch_inner: Bool,
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
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_im2col runs on CPU"
        # Vector copies where a window row reads consecutive input elements
        # and is long enough for them; short rows go value by value.
        comptime lanes = simd_width_of[dtype]()
        comptime contiguous = not channels_last and sw == 1
        var batch = x.dim_size(0)
        var channels = x.dim_size(3) if channels_last else x.dim_size(1)
        var height = x.dim_size(1) if channels_last else x.dim_size(2)
        var width = x.dim_size(2) if channels_last else x.dim_size(3)
        var out_h = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        var out_w = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        var rows = channels * kh * kw
        # Element strides of the input along its height and width.
        var h_step = width * channels if channels_last else width
        var w_step = channels if channels_last else 1
        var xp = x.unsafe_ptr()
        var op = output.unsafe_ptr()

        # One task per (channel, image): its kh * kw rows of the matrix. The
        # images of one channel go to one worker, since with `batch_inner`
        # their blocks lie side by side (a 4x4 image's are 64 bytes: split
        # between workers they shared cache lines).
        def rows_of(task: Int) {var}:
            var c = task // batch
            var n = task % batch
            var image = (
                n * height * width * channels + c if channels_last else (
                    n * channels + c
                ) * height * width
            )
            for i in range(kh):
                for j in range(kw):
                    var row = (c * kh + i) * kw + j
                    # Where this row's block of out_h * out_w values starts.
                    var block: Int
                    comptime if batch_inner:
                        block = (row * batch + n) * out_h * out_w
                    else:
                        block = (n * rows + row) * out_h * out_w
                    # The output columns whose input column lies inside the
                    # image: ow * sw + shift in [0, width).
                    var shift = j * dw - pw
                    var last = end_inside(shift, sw, width, out_w)
                    var first = min(first_inside(shift, sw), last)
                    comptime if contiguous and sh == 1:
                        if out_w == width and out_h * out_w >= 2 * lanes:
                            _shifted_plane(
                                op.unsafe_offset(block),
                                xp.unsafe_offset(image + (i * dh - ph) * width + shift),
                                out_h,
                                out_w,
                                i * dh - ph,
                                height,
                                first,
                                last,
                            )
                            continue
                    for oh in range(out_h):
                        var dst = op.unsafe_offset(block + oh * out_w)
                        var h = oh * sh - ph + i * dh
                        var lo = first
                        var hi = last
                        if h < 0 or h >= height:
                            lo = out_w
                            hi = out_w
                        var src = xp.unsafe_offset(image + h * h_step + shift * w_step)
                        if contiguous and out_w >= lanes:
                            zero_run(dst, 0, lo)
                            copy_run(dst, src, lo, hi)
                            zero_run(dst, hi, out_w)
                        else:
                            for ow in range(out_w):
                                var v = Scalar[dtype](0)
                                if ow >= lo and ow < hi:
                                    v = src.unsafe_offset(ow * sw * w_step).unsafe_load()
                                dst.unsafe_offset(ow).unsafe_store(v)

        parallelize(rows_of, batch * channels)
