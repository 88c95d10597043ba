# x copied as dense rows of pairs for the paired kernels: row m holds x(m, k)
# for k below K, then zeros up to an even length, so that (x(m, k), x(m, k + 1))
# is one 32-bit value. A weight gradient's rows are dY^T, stored [K, M] (unit
# stride along m): there 16 rows of pairs are built a vector at a time (two
# stored rows interleaved) and turned 16 x 16 in registers; a value-by-value
# copy of dY^T cost a [3072, 128] x [128, 768] product 36 % more than dense
# rows (docs/benchmarks.md).

from max.algorithm import parallelize
from std.math import ceildiv
from std.memory import bitcast, stack_allocation
from std.sys.info import num_physical_cores

from .pairs import LANES, transpose16


def pair_rows(
    copied: UnsafePointer[BFloat16, MutUntrackedOrigin],
    x: UnsafePointer[BFloat16, ImmutAnyOrigin],
    x_m: Int,
    x_k: Int,
    m_len: Int,
    k_len: Int,
    x_row: Int,
) raises:
    """`copied[m * x_row + k] = x[m * x_m + k * x_k]` for k < k_len, zero for
    k_len <= k < x_row (x_row even, at least k_len)."""
    var blocks = ceildiv(m_len, LANES)
    var tasks = min(num_physical_cores(), blocks)
    var per_task = ceildiv(blocks, tasks)

    def copy(task: Int) {var}:
        var first = task * per_task * LANES
        var last = min(m_len, first + per_task * LANES)
        var done = 0  # pairs of k copied by blocks, for every row of the task
        if x_m == 1:
            done = _transposed_blocks(copied, x, x_k, k_len, x_row, first, last)
        for m in range(first, last):
            var row = copied.unsafe_offset(m * x_row)
            var start = 2 * done if m < first + (last - first) // LANES * LANES else 0
            for k in range(start, x_row):
                row.unsafe_offset(k).unsafe_store(
                    x.unsafe_offset(m * x_m + k * x_k).unsafe_load() if k < k_len else BFloat16(0)
                )

    parallelize(copy, tasks)


def _transposed_blocks(
    copied: UnsafePointer[BFloat16, MutUntrackedOrigin],
    x: UnsafePointer[BFloat16, ImmutAnyOrigin],
    x_k: Int,
    k_len: Int,
    x_row: Int,
    first: Int,
    last: Int,
) -> Int:
    """x stored [K, M] (row k of x^T x_k values long): the whole 16-row blocks
    of rows first .. last, their pairs in whole blocks of 16; the count of
    pairs copied so (the rest is the caller's)."""
    var pair_blocks = (k_len // 2) // LANES
    var block = stack_allocation[LANES * LANES, DType.uint32]()
    for m0 in range(first, first + (last - first) // LANES * LANES, LANES):
        for b in range(pair_blocks):
            var p0 = b * LANES
            comptime for i in range(LANES):
                var k = 2 * (p0 + i)
                var low = x.unsafe_offset(k * x_k + m0).unsafe_load[width=LANES]()
                var high = x.unsafe_offset((k + 1) * x_k + m0).unsafe_load[width=LANES]()
                # 16 rows' pairs at (k, k + 1): one 32-bit value each.
                block.unsafe_offset(i * LANES).unsafe_store(
                    bitcast[DType.uint32, LANES](low.interleave(high))
                )
            transpose16(block)
            comptime for r in range(LANES):
                copied.unsafe_offset((m0 + r) * x_row + 2 * p0).bitcast[UInt32]().unsafe_store(
                    block.unsafe_offset(r * LANES).unsafe_load[width=LANES]()
                )
    return pair_blocks * LANES
