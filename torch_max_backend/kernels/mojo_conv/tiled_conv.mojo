# A float32 2-d convolution on the CPU as an implicit product: output pixels
# are the rows, output channels the columns, and (kernel row, kernel column,
# channel) the sum, each task keeping a tile of 6 pixels by 2 (AVX2) or 4
# (AVX-512) vectors of channels in registers while it runs along the sum, as
# kernels/mojo_tiled does for products. The rows of a tile are read straight
# from the channels-last input, so no im2col matrix is written and read back.
# On an AMD EPYC Zen 3 (AVX2) MAX 26.7's conv2d ran ResNet-18's 64- and
# 128-channel 3x3 layers at 63 and 43 GFLOP/s and this kernel at 87 and 90
# (docs/benchmarks.md, "Convolutions by our kernel").
#
# The input comes padded (by the graph), the filter as RSCF ([kh, kw, C, O],
# which is W [K, N] for the product), the output channels-last.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.memory import stack_allocation
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.sys.info import num_physical_cores

# A tile's rows (output pixels); with the vectors of the filter loaded each
# step and a broadcast they fill AVX2's 16 vector registers (AVX-512's 32 with
# 4 vectors a row).
comptime _ROWS = 6


@extensibility.register("torch_max_backend_tiled_conv2d")
struct TiledConv2d:
    """`output[n, oh, ow, o] = sum over (kh, kw, c) of
    x[n, oh * stride_h + kh * dilation_h, ow * stride_w + kw * dilation_w, c]
    * w[kh, kw, c, o]`, x padded already. Dense row-major operands (MAX hands
    a custom kernel its operands so)."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
        stride_h: Int,
        stride_w: Int,
        dilation_h: Int,
        dilation_w: Int,
        target: StaticString,
    ](
        output: OutputTensor[dtype=dtype, rank=4, ...],
        x: InputTensor[dtype=dtype, rank=4, ...],
        w: InputTensor[dtype=dtype, rank=4, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_tiled_conv2d runs on CPU"
        var batch = output.dim_size(0)
        var out_h = output.dim_size(1)
        var out_w = output.dim_size(2)
        var n_len = output.dim_size(3)
        var in_h = x.dim_size(1)
        var in_w = x.dim_size(2)
        var channels = x.dim_size(3)
        var kh_len = w.dim_size(0)
        var kw_len = w.dim_size(1)
        var m_len = batch * out_h * out_w
        var k_len = kh_len * kw_len * channels
        if m_len == 0 or n_len == 0:
            return
        _conv_tiles[stride_h, stride_w, dilation_h, dilation_w](
            output.unsafe_ptr(), x.unsafe_ptr(), w.unsafe_ptr(),
            out_h, out_w, in_h, in_w, channels, kh_len, kw_len, m_len, n_len, k_len,
        )


def _conv_tiles[
    dtype: DType, //, stride_h: Int, stride_w: Int, dilation_h: Int, dilation_w: Int
](
    result: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    w: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    out_h: Int,
    out_w: Int,
    in_h: Int,
    in_w: Int,
    channels: Int,
    kh_len: Int,
    kw_len: Int,
    m_len: Int,
    n_len: Int,
    k_len: Int,
) raises:
    """A task's work item is one panel of output channels over a range of
    pixel blocks: it copies the panel's filter columns once ([k][columns],
    zero-padded), then every block of its range reads that copy front to
    back. Panels are split into several ranges only where there are fewer
    panels than cores (64 channels on AVX-512 are one panel)."""
    comptime width = simd_width_of[dtype]()
    comptime vectors = 4 if width >= 16 else 2
    comptime cols = vectors * width
    var blocks = ceildiv(m_len, _ROWS)
    var panels = ceildiv(n_len, cols)
    var cores = num_physical_cores()
    var chunks = min(blocks, ceildiv(cores, panels))
    var blocks_per_chunk = ceildiv(blocks, chunks)
    var items = panels * chunks
    var tasks = min(items, cores)
    var per_task = ceildiv(items, tasks)
    var segments = kh_len * kw_len

    def run_items(task: Int) {var}:
        var panel = unsafe_alloc[Scalar[dtype]](max(1, k_len * cols))
        var seg_offsets = unsafe_alloc[Int](max(1, segments))
        for s in range(segments):
            var kh = s // kw_len
            var kw = s % kw_len
            seg_offsets.unsafe_offset(s).unsafe_store((kh * dilation_h * in_w + kw * dilation_w) * channels)
        # Where each row's pixel window starts in x, and each (kh, kw) step's
        # offset from there.
        var x_rows = stack_allocation[_ROWS, Int]()
        for item in range(task * per_task, min(items, (task + 1) * per_task)):
            var p = item // chunks
            var chunk = item % chunks
            var n0 = p * cols
            var valid = min(cols, n_len - n0)
            for k in range(k_len):
                var src = w.unsafe_offset(k * n_len + n0)
                var dst = panel.unsafe_offset(k * cols)
                if valid == cols:
                    comptime for j in range(vectors):
                        dst.unsafe_offset(j * width).unsafe_store(
                            src.unsafe_offset(j * width).unsafe_load[width=width]()
                        )
                else:
                    for j in range(cols):
                        dst.unsafe_offset(j).unsafe_store(
                            src.unsafe_offset(j).unsafe_load() if j < valid else Scalar[dtype](0)
                        )
            for block in range(chunk * blocks_per_chunk, min(blocks, (chunk + 1) * blocks_per_chunk)):
                var m0 = block * _ROWS
                # Rows past the edge repeat the last pixel and are not stored.
                comptime for i in range(_ROWS):
                    var m = min(m0 + i, m_len - 1)
                    var ow = m % out_w
                    var rest = m // out_w
                    var oh = rest % out_h
                    var img = rest // out_h
                    x_rows.unsafe_offset(i).unsafe_store(
                        ((img * in_h + oh * stride_h) * in_w + ow * stride_w) * channels
                    )
                var acc = stack_allocation[_ROWS * cols, dtype]()
                comptime for t in range(_ROWS * vectors):
                    acc.unsafe_offset(t * width).unsafe_store(SIMD[dtype, width](0))
                for s in range(segments):
                    var off = seg_offsets.unsafe_offset(s).unsafe_load()
                    var wseg = panel.unsafe_offset(s * channels * cols)
                    for c in range(channels):
                        var wk = stack_allocation[cols, dtype]()
                        comptime for j in range(vectors):
                            wk.unsafe_offset(j * width).unsafe_store(
                                wseg.unsafe_offset(c * cols + j * width).unsafe_load[width=width]()
                            )
                        comptime for i in range(_ROWS):
                            var at = x_rows.unsafe_offset(i).unsafe_load() + off + c
                            var xv = SIMD[dtype, width](x.unsafe_offset(at).unsafe_load())
                            comptime for j in range(vectors):
                                var a = acc.unsafe_offset((i * vectors + j) * width)
                                a.unsafe_store(
                                    xv.fma(
                                        wk.unsafe_offset(j * width).unsafe_load[width=width](),
                                        a.unsafe_load[width=width](),
                                    )
                                )
                var rows = min(_ROWS, m_len - m0)
                comptime for i in range(_ROWS):
                    if i < rows:
                        var dst = result.unsafe_offset((m0 + i) * n_len + n0)
                        if valid == cols:
                            comptime for j in range(vectors):
                                dst.unsafe_offset(j * width).unsafe_store(
                                    acc.unsafe_offset((i * vectors + j) * width).unsafe_load[width=width]()
                                )
                        else:
                            for j in range(valid):
                                dst.unsafe_offset(j).unsafe_store(
                                    acc.unsafe_offset(i * cols + j).unsafe_load()
                                )
        panel.unsafe_free()
        seg_offsets.unsafe_free()

    parallelize(run_items, tasks)
