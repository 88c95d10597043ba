# A task's float32 sums started from a bias, and written to the
# half-precision output, each rounded once to nearest, ties to even, as torch
# rounds. bfloat16 by integer arithmetic on the bits, as kernels/mojo_rounding
# does (a package of its own, which this one cannot import): Mojo's cast to
# bfloat16 converts about 0.65 values a nanosecond on an AVX-512 Xeon (a
# 64x1024 block: 100 us, two thirds of the product it follows); float16 by the
# cast, which the CPU does in hardware.

from std.memory import bitcast

comptime _WIDTH = 16


@always_inline
def _rounded[dtype: DType, width: Int](v: SIMD[DType.float32, width]) -> SIMD[dtype, width]:
    comptime if dtype == DType.bfloat16:
        var bits = bitcast[DType.uint32, width](v)
        # Adding 0x7FFF plus the kept part's lowest bit carries into the kept
        # 16 bits exactly when the dropped ones are over half, or half with an
        # odd kept part; infinities carry nothing.
        var nearest = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        # A NaN could carry into the exponent's sign: keep it a quiet NaN,
        # told by its bits (under MAX's fast-math flags `v != v` was false).
        var quiet = (bits >> 16) | 0x40
        var nan = (bits & 0x7FFFFFFF).gt(SIMD[DType.uint32, width](0x7F800000))
        return bitcast[dtype, width](nan.select(quiet, nearest).cast[DType.uint16]())
    else:
        return v.cast[dtype]()


def store_rounded[dtype: DType](
    sums: UnsafePointer[Float32, MutUntrackedOrigin],
    dst: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    rows: Int,
    cols: Int,
    dst_row: Int,
):
    """`dst[i * dst_row + j] = sums[i * cols + j]` rounded, for a block of
    `rows` x `cols` sums stored densely."""
    for i in range(rows):
        var src = sums.unsafe_offset(i * cols)
        var row = dst.unsafe_offset(i * dst_row)
        var j = 0
        while j + _WIDTH <= cols:
            row.unsafe_offset(j).unsafe_store(
                _rounded[dtype, _WIDTH](src.unsafe_offset(j).unsafe_load[width=_WIDTH]())
            )
            j += _WIDTH
        while j < cols:
            row.unsafe_offset(j).unsafe_store(_rounded[dtype, 1](src.unsafe_offset(j).unsafe_load()))
            j += 1


def fill_rows[dtype: DType](
    dst: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    bias: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    rows: Int,
    cols: Int,
    dst_row: Int,
):
    """`dst[i * dst_row + j] = bias[j]`: a float32 block's rows start as the bias."""
    for i in range(rows):
        var row = dst.unsafe_offset(i * dst_row)
        for j in range(cols):
            row.unsafe_offset(j).unsafe_store(bias.unsafe_offset(j).unsafe_load())


def fill_sums[dtype: DType](
    sums: UnsafePointer[Float32, MutUntrackedOrigin],
    bias: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    rows: Int,
    cols: Int,
):
    """`sums[i * cols + j] = bias[j]` widened to float32 (exactly)."""
    for i in range(rows):
        var row = sums.unsafe_offset(i * cols)
        for j in range(cols):
            row.unsafe_offset(j).unsafe_store(bias.unsafe_offset(j).unsafe_load().cast[DType.float32]())


def bias_beta(count: Int, stride: Int, n_len: Int, kernel: StaticString) raises -> Float32:
    """MKL's beta for a bias operand of `count` values a `stride` apart: 1,
    the bias starting the sums and the product added onto it, or 0 for an
    empty one (no bias). Anything but N dense values is refused."""
    if count == 0:
        return 0.0
    if count != n_len or stride != 1:
        raise Error(String(kernel) + ": a bias of N dense values")
    return 1.0
