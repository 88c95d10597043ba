# im2col for convolutions run as a matmul on CPU: one pass over the input
# writes every window. Built from MAX ops (a pad, one strided slice per kernel
# offset, a stack) the same matrix took three times as long (256 channels at
# 14x14, 3x3: 0.64 ms against 0.19 ms), and MAX's ops cannot read a
# channels-last input into this channels-first order without a permute.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.utils.index import IndexList


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
        var batch = x.dim_size(0)
        var channels = x.dim_size(3) if channels_last else x.dim_size(1)
        var height = x.dim_size(1) if channels_last else x.dim_size(2)
        var width = x.dim_size(2) if channels_last else x.dim_size(3)
        var out_h = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        var out_w = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1

        # One task per (image, channel): its kh * kw rows of the matrix.
        def rows_of(task: Int) {var}:
            var n = task // channels
            var c = task % channels
            for i in range(kh):
                for j in range(kw):
                    var row = (c * kh + i) * kw + j
                    for oh in range(out_h):
                        var h = oh * sh - ph + i * dh
                        var h_inside = h >= 0 and h < height
                        for ow in range(out_w):
                            var w = ow * sw - pw + j * dw
                            var v = Scalar[dtype](0)
                            if h_inside and w >= 0 and w < width:
                                comptime if channels_last:
                                    v = x.load[1](IndexList[4](n, h, w, c))
                                else:
                                    v = x.load[1](IndexList[4](n, c, h, w))
                            comptime if batch_inner:
                                output.store[1](IndexList[4](row, n, oh, ow), v)
                            else:
                                output.store[1](IndexList[4](n, row, oh, ow), v)

        parallelize(rows_of, batch * channels)
