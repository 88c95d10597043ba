# A few rows times a Linear's weight, W stored [N, K] with K along its rows,
# on bfloat16 pair dot products: each of W's rows is read where it lies, 32
# values a step, against the same 32 values of every row of x, so W is read
# once, front to back, with nothing packed (for one to eight rows a packed
# panel would cost as much as the product). Each sum's 16 lanes are added up
# at the end, its bias joins it, and it is rounded once.

from max.algorithm import parallelize
from std.math import ceildiv
from std.memory import stack_allocation
from std.sys.info import num_physical_cores

from .pairs import LANES, pair_dot, rounded

# At most this many rows take this path.
comptime FEW_ROWS = 8
# K values a step: one vector of pairs.
comptime _STEP = 2 * LANES
# W rows a task's share is counted in.
comptime _SHARE = 8


def few_rows(
    result: UnsafePointer[BFloat16, MutAnyOrigin],
    x: UnsafePointer[BFloat16, ImmutAnyOrigin],
    x_row: Int,
    w: UnsafePointer[BFloat16, ImmutAnyOrigin],
    w_n: Int,
    bias: UnsafePointer[BFloat16, ImmutAnyOrigin],
    has_bias: Bool,
    m_len: Int,
    n_len: Int,
    k_len: Int,
) raises:
    """`result[m, n] = x[m] . W[n] (+ bias[n])` for the m_len (1 to
    FEW_ROWS) rows of x, each x_row values apart, and W's rows w_n apart;
    the tasks share W's rows."""
    var shares = ceildiv(n_len, _SHARE)
    var tasks = min(num_physical_cores(), shares)
    var per_task = ceildiv(shares, tasks)

    def run(task: Int) {var}:
        var first = task * per_task * _SHARE
        var last = min(n_len, first + per_task * _SHARE)
        comptime for rows in range(1, FEW_ROWS + 1):
            if m_len == rows and first < last:
                _dots[rows](result, x, x_row, w, w_n, bias, has_bias, n_len, k_len, first, last)

    parallelize(run, tasks)


def _dots[
    rows: Int
](
    result: UnsafePointer[BFloat16, MutAnyOrigin],
    x: UnsafePointer[BFloat16, ImmutAnyOrigin],
    x_row: Int,
    w: UnsafePointer[BFloat16, ImmutAnyOrigin],
    w_n: Int,
    bias: UnsafePointer[BFloat16, ImmutAnyOrigin],
    has_bias: Bool,
    n_len: Int,
    k_len: Int,
    first: Int,
    last: Int,
):
    """W's rows first .. last against the `rows` rows of x."""
    # W rows a pass takes: 8 sums of 16 lanes for one row, up to 16 for
    # eight, with the x vectors held beside them in the 32 registers.
    comptime group = 8 if rows == 1 else (4 if rows <= 3 else 2)
    var full = k_len - k_len % _STEP
    var acc = stack_allocation[rows * group * LANES, DType.float32]()
    var xs = stack_allocation[rows * _STEP, DType.bfloat16]()
    var w_at = stack_allocation[group, Int]()
    var n = first
    while n < last:
        comptime for t in range(rows * group):
            acc.unsafe_offset(t * LANES).unsafe_store(SIMD[DType.float32, LANES](0))
        # The last pass repeats the range's last row where it runs short.
        comptime for j in range(group):
            w_at.unsafe_offset(j).unsafe_store(min(n + j, last - 1) * w_n)
        for k in range(0, full, _STEP):
            comptime for r in range(rows):
                xs.unsafe_offset(r * _STEP).unsafe_store(
                    x.unsafe_offset(r * x_row + k).unsafe_load[width=_STEP]()
                )
            comptime for j in range(group):
                var wv = w.unsafe_offset(w_at.unsafe_offset(j).unsafe_load() + k).unsafe_load[width=_STEP]()
                comptime for r in range(rows):
                    var a = acc.unsafe_offset((r * group + j) * LANES)
                    a.unsafe_store(
                        pair_dot(
                            a.unsafe_load[width=LANES](),
                            xs.unsafe_offset(r * _STEP).unsafe_load[width=_STEP](),
                            wv,
                        )
                    )
        comptime for r in range(rows):
            comptime for j in range(group):
                if n + j < last:
                    var s = acc.unsafe_offset((r * group + j) * LANES).unsafe_load[width=LANES]().reduce_add()
                    var w_row = w.unsafe_offset(w_at.unsafe_offset(j).unsafe_load())
                    # K's last values short of a step: their products are exact
                    # in float32, added one by one.
                    for k in range(full, k_len):
                        s += x.unsafe_offset(r * x_row + k).unsafe_load().cast[DType.float32]() * w_row.unsafe_offset(
                            k
                        ).unsafe_load().cast[DType.float32]()
                    if has_bias:
                        s += bias.unsafe_offset(n + j).unsafe_load().cast[DType.float32]()
                    result.unsafe_offset(r * n_len + n + j).unsafe_store(rounded[1](SIMD[DType.float32, 1](s)))
        n += group
