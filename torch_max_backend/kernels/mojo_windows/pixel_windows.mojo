# The windows of a channels-last image, each output pixel's one row in
# (kernel row, kernel column, channel) order: the order of a channels-last
# filter [O, kh, kw, C] flattened to [O, kh * kw * C]. A convolution is then
# these rows times that filter transposed, and its result [pixels, O] is the
# output channels-last: neither the filter nor the activations permuted. A
# model converted with `to(memory_format=torch.channels_last)` hands its
# filters so; read in torch's (channel, kernel row, kernel column) order,
# its large filters were transposed at every call (ResNet-18's 10.5 M
# floats of 3x3 filters on 14x14 and 7x7 maps, at MAX's 4.6 GB/s permute).
# Each window row is kw runs of C consecutive values, or one run of kw * C
# where the window's columns are adjacent (no dilation).

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.sys import simd_width_of


@always_inline
def _zero[
    dtype: DType, //
](dst: UnsafePointer[Scalar[dtype], MutAnyOrigin], count: Int):
    """Zeros dst[0:count]."""
    comptime lanes = simd_width_of[dtype]()
    var at = 0
    while at + lanes <= count:
        dst.unsafe_offset(at).unsafe_store(SIMD[dtype, lanes](0))
        at += lanes
    while at < count:
        dst.unsafe_offset(at).unsafe_store(Scalar[dtype](0))
        at += 1


@always_inline
def _copy[
    dtype: DType, //
](
    dst: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    src: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    count: Int,
):
    """dst[0:count] = src[0:count]."""
    comptime lanes = simd_width_of[dtype]()
    var at = 0
    while at + lanes <= count:
        dst.unsafe_offset(at).unsafe_store(
            src.unsafe_offset(at).unsafe_load[width=lanes]()
        )
        at += lanes
    while at < count:
        dst.unsafe_offset(at).unsafe_store(src.unsafe_offset(at).unsafe_load())
        at += 1


@extensibility.register("torch_max_backend_pixel_windows")
struct PixelWindows:
    """The windows of `x` (N, H, W, C) as `output` [N, out_h, out_w, kh * kw
    * C]: each output pixel's window one row, in (i, j, c) order; zero where
    the window reaches into the padding. The output sizes are the output's
    (the lowering gives torch's). CPU only.
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
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_pixel_windows runs on CPU"
        var batch = x.dim_size(0)
        var height = x.dim_size(1)
        var width = x.dim_size(2)
        var channels = x.dim_size(3)
        var out_h = output.dim_size(1)
        var out_w = output.dim_size(2)
        var row_len = kh * kw * channels
        var xp = x.unsafe_ptr()
        var op = output.unsafe_ptr()

        # One task per output row of one image: out_w window rows.
        def rows_of(task: Int) {var}:
            var n = task // out_h
            var oh = task % out_h
            for ow in range(out_w):
                var dst = op.unsafe_offset((task * out_w + ow) * row_len)
                var w0 = ow * sw - pw
                # The kernel columns j whose image column w0 + j * dw lies
                # inside the image: [j_lo, j_hi).
                var j_lo = 0
                while j_lo < kw and w0 + j_lo * dw < 0:
                    j_lo += 1
                var j_hi = kw
                while j_hi > j_lo and w0 + (j_hi - 1) * dw >= width:
                    j_hi -= 1
                for i in range(kh):
                    var h = oh * sh - ph + i * dh
                    var row = dst.unsafe_offset(i * kw * channels)
                    if h < 0 or h >= height:
                        _zero(row, kw * channels)
                        continue
                    var src = xp.unsafe_offset(
                        ((n * height + h) * width + w0) * channels
                    )
                    _zero(row, j_lo * channels)
                    comptime if dw == 1:
                        _copy(
                            row.unsafe_offset(j_lo * channels),
                            src.unsafe_offset(j_lo * channels),
                            (j_hi - j_lo) * channels,
                        )
                    else:
                        for j in range(j_lo, j_hi):
                            _copy(
                                row.unsafe_offset(j * channels),
                                src.unsafe_offset(j * dw * channels),
                                channels,
                            )
                    _zero(
                        row.unsafe_offset(j_hi * channels), (kw - j_hi) * channels
                    )

        parallelize(rows_of, batch * out_h)
