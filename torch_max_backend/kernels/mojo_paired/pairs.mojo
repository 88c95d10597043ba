# What the paired kernels share: the bfloat16 pair dot product (AVX512-BF16's
# `vdpbf16ps`) and the rounding of float32 sums to bfloat16.

from std.memory import bitcast, stack_allocation
from std.sys import CompilationTarget, llvm_intrinsic

comptime LANES = 16
comptime F32x16 = SIMD[DType.float32, LANES]
comptime Pairs = SIMD[DType.bfloat16, 2 * LANES]


@always_inline
def has_pair_dot() -> Bool:
    return CompilationTarget._has_feature["avx512bf16"]()


@always_inline
def pair_dot(acc: F32x16, a: Pairs, b: Pairs) -> F32x16:
    """`acc[i] + a[2i] * b[2i] + a[2i + 1] * b[2i + 1]` for each lane."""
    comptime if has_pair_dot():
        return llvm_intrinsic["llvm.x86.avx512bf16.dpbf16ps.512", F32x16](acc, a, b)
    else:
        # Only for machines without the instruction, where the lowering does
        # not offer these kernels (lower/product_kernels.py); they still compile.
        var a2 = a.deinterleave()
        var b2 = b.deinterleave()
        var inner = a2[1].cast[DType.float32]().fma(b2[1].cast[DType.float32](), acc)
        return a2[0].cast[DType.float32]().fma(b2[0].cast[DType.float32](), inner)


@always_inline
def rounded[width: Int](v: SIMD[DType.float32, width]) -> SIMD[DType.bfloat16, width]:
    """To nearest, ties to even, on the bits (as kernels/mojo_rounding, a
    package this one cannot import); a NaN stays a quiet NaN."""
    var bits = bitcast[DType.uint32, width](v)
    var nearest = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    var quiet = (bits >> 16) | 0x40
    var nan = (bits & 0x7FFFFFFF).gt(SIMD[DType.uint32, width](0x7F800000))
    return bitcast[DType.bfloat16, width](nan.select(quiet, nearest).cast[DType.uint16]())


@always_inline
def transpose16(block: UnsafePointer[UInt32, MutUntrackedOrigin]):
    """The 16 x 16 block turned about its diagonal: four rounds of pairing row
    i with row i + 8 and interleaving them into rows 2i and 2i + 1."""
    comptime for _ in range(4):
        var rows = stack_allocation[LANES * LANES, DType.uint32]()
        comptime for i in range(LANES // 2):
            var both = block.unsafe_offset(i * LANES).unsafe_load[width=LANES]().interleave(
                block.unsafe_offset((i + LANES // 2) * LANES).unsafe_load[width=LANES]()
            )
            rows.unsafe_offset(2 * i * LANES).unsafe_store(both.slice[LANES, offset=0]())
            rows.unsafe_offset((2 * i + 1) * LANES).unsafe_store(both.slice[LANES, offset=LANES]())
        comptime for i in range(LANES):
            block.unsafe_offset(i * LANES).unsafe_store(rows.unsafe_offset(i * LANES).unsafe_load[width=LANES]())
