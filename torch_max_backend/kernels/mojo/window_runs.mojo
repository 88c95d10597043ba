# The runs of one image row that a window row reads (im2col) or adds into
# (col2im), shared by the two kernels. Window rows are short (4 to 56 values
# in ResNet-18's layers): runs move in vectors of the machine's width, then
# of 8 and of 4, then value by value.

from std.math import ceildiv
from std.sys import simd_width_of


@always_inline
def first_inside(shift: Int, stride: Int) -> Int:
    """The first window column u whose image column u * stride + shift is
    not left of the image."""
    return 0 if shift >= 0 else ceildiv(-shift, stride)


@always_inline
def end_inside(shift: Int, stride: Int, width: Int, out_w: Int) -> Int:
    """One past the last window column u (of out_w) whose image column
    u * stride + shift is not right of an image `width` wide."""
    if width - 1 - shift < 0:
        return 0
    return min(out_w, (width - 1 - shift) // stride + 1)


@always_inline
def zero_run[
    dtype: DType, //
](dst: UnsafePointer[Scalar[dtype], MutAnyOrigin], start: Int, end: Int):
    """Zeros dst[start:end]."""
    comptime lanes = simd_width_of[dtype]()
    var at = start
    while at + lanes <= end:
        dst.unsafe_offset(at).unsafe_store(SIMD[dtype, lanes](0))
        at += lanes
    comptime if lanes > 8:
        if at + 8 <= end:
            dst.unsafe_offset(at).unsafe_store(SIMD[dtype, 8](0))
            at += 8
    comptime if lanes > 4:
        if at + 4 <= end:
            dst.unsafe_offset(at).unsafe_store(SIMD[dtype, 4](0))
            at += 4
    while at < end:
        dst.unsafe_offset(at).unsafe_store(Scalar[dtype](0))
        at += 1


@always_inline
def copy_run[
    dtype: DType, //
](
    dst: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    src: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    start: Int,
    end: Int,
):
    """dst[start:end] = src[start:end]."""
    comptime lanes = simd_width_of[dtype]()
    var at = start
    while at + lanes <= end:
        dst.unsafe_offset(at).unsafe_store(
            src.unsafe_offset(at).unsafe_load[width=lanes]()
        )
        at += lanes
    comptime if lanes > 8:
        if at + 8 <= end:
            dst.unsafe_offset(at).unsafe_store(src.unsafe_offset(at).unsafe_load[width=8]())
            at += 8
    comptime if lanes > 4:
        if at + 4 <= end:
            dst.unsafe_offset(at).unsafe_store(src.unsafe_offset(at).unsafe_load[width=4]())
            at += 4
    while at < end:
        dst.unsafe_offset(at).unsafe_store(src.unsafe_offset(at).unsafe_load())
        at += 1


@always_inline
def add_run[
    dtype: DType, //
](
    dst: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    src: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    start: Int,
    end: Int,
):
    """dst[start:end] += src[start:end]."""
    comptime lanes = simd_width_of[dtype]()
    var at = start
    while at + lanes <= end:
        dst.unsafe_offset(at).unsafe_store(
            dst.unsafe_offset(at).unsafe_load[width=lanes]()
            + src.unsafe_offset(at).unsafe_load[width=lanes]()
        )
        at += lanes
    comptime if lanes > 8:
        if at + 8 <= end:
            dst.unsafe_offset(at).unsafe_store(
                dst.unsafe_offset(at).unsafe_load[width=8]()
                + src.unsafe_offset(at).unsafe_load[width=8]()
            )
            at += 8
    comptime if lanes > 4:
        if at + 4 <= end:
            dst.unsafe_offset(at).unsafe_store(
                dst.unsafe_offset(at).unsafe_load[width=4]()
                + src.unsafe_offset(at).unsafe_load[width=4]()
            )
            at += 4
    while at < end:
        dst.unsafe_offset(at).unsafe_store(
            dst.unsafe_offset(at).unsafe_load() + src.unsafe_offset(at).unsafe_load()
        )
        at += 1
