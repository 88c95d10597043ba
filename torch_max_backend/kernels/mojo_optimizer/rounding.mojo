# What the optimizer kernels share: loading values of any float type as
# float32, rounding a float32 result to a half-precision type where torch
# rounds it, and telling NaNs by their bits.

from std.memory import bitcast


@always_inline
def load_wide[
    dtype: DType, origin: Origin, //, w: Int
](ptr: UnsafePointer[Scalar[dtype], origin], i: Int) -> SIMD[DType.float32, w]:
    """`w` values from `ptr + i`, as float32."""
    return ptr.unsafe_offset(i).unsafe_load[width=w]().cast[DType.float32]()


@always_inline
def rounded[
    w: Int, //, dtype: DType
](x: SIMD[DType.float32, w]) -> SIMD[DType.float32, w]:
    """`x` rounded to `dtype` and back: what torch leaves of a result it
    stores as a half-precision tensor (its ops compute in float32 and round
    to the output's type). Nothing for float32."""
    comptime if dtype == DType.float32:
        return x
    else:
        return x.cast[dtype]().cast[DType.float32]()


@always_inline
def is_nan[w: Int](x: SIMD[DType.float32, w]) -> SIMD[DType.bool, w]:
    """Which lanes hold a NaN, read from the bits: MAX compiles kernels with
    fast-math flags, under which `x != x` may fold to false."""
    var bits = bitcast[DType.uint32, w](x) & 0x7FFFFFFF
    return bits.gt(SIMD[DType.uint32, w](0x7F800000))


@always_inline
def check_float[dtype: DType]():
    """The value types the optimizer kernels update."""
    comptime assert (
        dtype == DType.float32 or dtype == DType.bfloat16 or dtype == DType.float16
    ), "the optimizer kernels update float32, bfloat16 or float16 values"


@always_inline
def rounded_number[dtype: DType](x: Float32) -> Float32:
    """`rounded` of one number (a coefficient)."""
    comptime if dtype == DType.float32:
        return x
    else:
        return x.cast[dtype]().cast[DType.float32]()
