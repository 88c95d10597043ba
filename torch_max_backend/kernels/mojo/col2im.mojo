# col2im, the adjoint of im2col: a convolution's input gradient from the
# gradient of its windows (the filter's transpose times the output's
# gradient). Through MAX's conv2d (a transposed convolution over the flipped
# filter) the input gradient of ResNet-18's deep layers (7x7 and 4x4 pixels,
# 256 and 512 channels) took two to three times eager's (docs/benchmarks.md,
# "Training steps").

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.utils.index import IndexList


@extensibility.register("torch_max_backend_col2im")
struct Col2im:
    """An [N, C, H, W] image whose every pixel is the sum of the entries of
    `cols` ([N, C * kh * kw, out_h, out_w], im2col's layout: rows in the
    (c, i, j) order of a [O, C, kh, kw] filter) that im2col would have read
    from it; entries that fall in the padding are dropped. The output's
    height and width are the forward input's (given by the output type).
    With `batch_inner` set `cols` is [C * kh * kw, N, out_h, out_w], as
    im2col writes it with that parameter. CPU only."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
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
        cols: InputTensor[dtype=dtype, rank=4, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_col2im runs on CPU"
        var batch = output.dim_size(0)
        var channels = output.dim_size(1)
        var height = output.dim_size(2)
        var width = output.dim_size(3)
        var out_h = cols.dim_size(2)  # (the same axes in either layout)
        var out_w = cols.dim_size(3)

        # One task per (image, channel) plane; each pixel gathers the window
        # entries that read it, and is written once.
        def plane(task: Int) {var}:
            var n = task // channels
            var c = task % channels
            for h in range(height):
                for w in range(width):
                    var total = Scalar[dtype](0)
                    for i in range(kh):
                        var t = h + ph - i * dh
                        if t < 0 or t % sh != 0 or t // sh >= out_h:
                            continue
                        for j in range(kw):
                            var u = w + pw - j * dw
                            if u < 0 or u % sw != 0 or u // sw >= out_w:
                                continue
                            var row = (c * kh + i) * kw + j
                            comptime if batch_inner:
                                total += cols.load[1](
                                    IndexList[4](row, n, t // sh, u // sw)
                                )
                            else:
                                total += cols.load[1](
                                    IndexList[4](n, row, t // sh, u // sw)
                                )
                    output.store[1](IndexList[4](n, c, h, w), total)

        parallelize(plane, batch * channels)
