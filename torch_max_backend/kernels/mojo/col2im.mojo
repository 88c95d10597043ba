# col2im, the adjoint of im2col: a convolution's input gradient from the
# gradient of its windows (the filter's transpose times the output's
# gradient). Through MAX's conv2d (a transposed convolution over the flipped
# filter) the input gradient of ResNet-18's deep layers (7x7 and 4x4 pixels,
# 256 and 512 channels) took two to three times eager's (docs/benchmarks.md,
# "Training steps"). Each window row is added into a run of one image row,
# with vector adds where a stride of 1 makes both runs contiguous: gathered
# pixel by pixel through 4-d indices the kernel moved 3-4 GB/s.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext

from .window_runs import add_run, end_inside, first_inside


@extensibility.register("torch_max_backend_col2im")
struct Col2im:
    """An [N, C, H, W] image whose every pixel is the sum of the entries of
    `cols` ([N, C * kh * kw, out_h, out_w], im2col's layout: rows in the
    (c, i, j) order of a [O, C, kh, kw] filter) that im2col would have read
    from it; entries that fall in the padding are dropped. The output's
    height and width are the forward input's (given by the output type).
    With `batch_inner` set `cols` is [C * kh * kw, N, out_h, out_w], as
    im2col writes it with that parameter. CPU only.

    Each pixel's entries are added in (i, j) order from zero, as a pixel by
    pixel gather would add them: a window offset reads a pixel at most once.
    """

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
        var rows = channels * kh * kw
        var cp = cols.unsafe_ptr()
        var op = output.unsafe_ptr()

        # One task per (image, channel) plane, written by this task alone.
        def plane(task: Int) {var}:
            var n = task // channels
            var c = task % channels
            var dst = op.unsafe_offset(task * height * width)
            for p in range(height * width):
                dst.unsafe_offset(p).unsafe_store(Scalar[dtype](0))
            for i in range(kh):
                for j in range(kw):
                    var row = (c * kh + i) * kw + j
                    var start: Int
                    comptime if batch_inner:
                        start = (row * batch + n) * out_h * out_w
                    else:
                        start = (n * rows + row) * out_h * out_w
                    # Window column u reads pixel column u * sw + shift.
                    var shift = j * dw - pw
                    var first = first_inside(shift, sw)
                    var last = end_inside(shift, sw, width, out_w)
                    for t in range(out_h):
                        var h = t * sh - ph + i * dh
                        if h < 0 or h >= height:
                            continue
                        var src = cp.unsafe_offset(start + t * out_w)
                        var to = dst.unsafe_offset(h * width + shift)
                        comptime if sw == 1:
                            add_run(to, src, first, last)
                        else:
                            for u in range(first, last):
                                var at = to.unsafe_offset(u * sw)
                                at.unsafe_store(
                                    at.unsafe_load() + src.unsafe_offset(u).unsafe_load()
                                )

        parallelize(plane, batch * channels)
