# A float32 product of a few rows with a large weight on the CPU (a decode
# step's Linear and Conv1D layers), at the speed the weight streams from
# memory. Such a product reads every weight element
# once for a few multiply-adds, so in a model whose weights do not fit the
# CPU's cache its time is the time to bring the weight in. Read in tiles of
# a few rows, a [K, N] weight is a stride of short runs, which the CPU's own
# prefetchers barely follow: MAX's matmul, MKL and our skinny kernel read
# such weights at 9-11 GB/s at 8 rows where `torch.sum` reads 16-19 GB/s
# (Intel Xeon, 2 cores; docs/benchmarks.md, "Products that stream their
# weights"). W [K, N]: each task owns a slice of K, so that its weight rows
# are one contiguous region, runs over it in column tiles whose partial sums
# stay in the first-level cache, and asks for the rows it will read next
# (`_AHEAD` row groups on) while it multiplies the current ones. W [N, K] (a
# Linear's weight): each task owns a block of W's rows, takes two at a time
# against every input row, and asks for each row's values `_AHEAD_NK` on.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.memory import stack_allocation
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.sys.info import num_physical_cores
from std.sys.intrinsics import prefetch

# A tile's columns: a task's partial sums for all its rows (rows * columns
# values, 16 KiB of float32) stay within the first-level cache. So at one row
# a tile is a whole weight row up to 4096 columns, and the task's slice of W
# one front-to-back stream: GPT-2 small's batch-1 decode step took 6-9 %
# less time so than in tiles of 512, which read each weight row in two runs
# (both compiled in one process, generate() timed in 36 interleaved rounds;
# AMD EPYC Zen 3, 2026-12-04).
comptime _TILE_VALUES = 4096
# Weight rows multiplied per pass over a tile's partial sums.
comptime _DEPTH = 4
# How many row groups ahead the prefetches run (8 weight rows).
comptime _AHEAD = 2
# The most rows one pass over the weight serves; more rows (a symbolic batch
# larger than its capture) take further passes.
comptime _BLOCK_ROWS = 8
# A task's slice of K has at least this many rows.
comptime _MIN_SLICE = 32
# W [N, K]: how far along a weight row the prefetches run, in values (4 KiB:
# at 8 rows 8x768x2304 from memory took 684 us so, 912 without, against
# 1125 on MAX's matmul; Intel Xeon, 2026-12-01).
comptime _AHEAD_NK = 1024


@extensibility.register("torch_max_backend_streamed_matmul")
struct StreamedMatmul:
    """`output[rows, N] = x[rows, K] @ W`, W stored [K, N], or [N, K] when
    `weight_nk` is set (a Linear's weight, read transposed), all dense
    row-major; `rows` 0: counted at run time and done `_BLOCK_ROWS` at a
    time."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
        rows: Int,
        weight_nk: Bool,
        target: StaticString,
    ](
        output: OutputTensor[dtype=dtype, rank=2, ...],
        x: InputTensor[dtype=dtype, rank=2, ...],
        w: InputTensor[dtype=dtype, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_streamed_matmul runs on CPU"
        var k_len = x.dim_size(1)
        var n_len = output.dim_size(1)
        var dense = x.strides()[1] == 1 and w.strides()[1] == 1 and output.strides()[1] == 1
        var w_row = k_len if weight_nk else n_len
        if not dense or x.strides()[0] != k_len or w.strides()[0] != w_row or output.strides()[0] != n_len:
            raise Error("torch_max_backend_streamed_matmul: operands must be dense and row-major")
        var xp = x.unsafe_ptr()
        var wp = w.unsafe_ptr()
        var op = output.unsafe_ptr()
        comptime if rows > 0:
            _rows_times_weight[rows, weight_nk](op, xp, wp, n_len, k_len)
        else:
            var total = x.dim_size(0)
            var first = 0
            while total - first >= _BLOCK_ROWS:
                _rows_times_weight[_BLOCK_ROWS, weight_nk](
                    op.unsafe_offset(first * n_len), xp.unsafe_offset(first * k_len), wp, n_len, k_len
                )
                first += _BLOCK_ROWS
            comptime for left in range(1, _BLOCK_ROWS):
                if total - first == left:
                    _rows_times_weight[left, weight_nk](
                        op.unsafe_offset(first * n_len), xp.unsafe_offset(first * k_len), wp, n_len, k_len
                    )


def _rows_times_weight[
    dtype: DType, //, count: Int, weight_nk: Bool
](
    result: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    w: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    n_len: Int,
    k_len: Int,
) raises:
    comptime if weight_nk:
        _rows_times_stored_rows[count](result, x, w, n_len, k_len)
    else:
        _rows_times_kn_weight[count](result, x, w, n_len, k_len)


def _rows_times_stored_rows[
    dtype: DType, //, count: Int
](
    result: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    w: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    n_len: Int,
    k_len: Int,
) raises:
    """W [N, K]: result[m, n] is row m of x dotted with row n of W, two of
    W's rows at a time, count * 2 vectors of partial sums."""
    comptime width = simd_width_of[dtype]()
    comptime pair = 2
    # A few tasks a core, so that a slow core holds the rest up less.
    var tasks = 4 * num_physical_cores()
    var block = max(pair, ceildiv(ceildiv(n_len, tasks), pair) * pair)

    def dot_rows(task: Int) {var}:
        var acc = stack_allocation[count * pair * width, dtype]()
        var n = task * block
        var n_end = min(n_len, n + block)
        while n < n_end:
            var live = min(pair, n_end - n)
            comptime for t in range(count * pair):
                acc.unsafe_offset(t * width).unsafe_store(SIMD[dtype, width](0))
            var k = 0
            if live == pair:
                var row0 = w.unsafe_offset(n * k_len)
                var row1 = w.unsafe_offset((n + 1) * k_len)
                # Past a row's end the prefetches run on into the next rows,
                # never past W's last value.
                var last = (n_len - n - 1) * k_len - _AHEAD_NK
                while k + width <= k_len:
                    if k < last:
                        prefetch(row0.unsafe_offset(k + _AHEAD_NK))
                        prefetch(row1.unsafe_offset(k + _AHEAD_NK))
                    var w0 = row0.unsafe_offset(k).unsafe_load[width=width]()
                    var w1 = row1.unsafe_offset(k).unsafe_load[width=width]()
                    comptime for m in range(count):
                        var xv = x.unsafe_offset(m * k_len + k).unsafe_load[width=width]()
                        var a0 = acc.unsafe_offset((m * pair) * width)
                        var a1 = acc.unsafe_offset((m * pair + 1) * width)
                        a0.unsafe_store(xv.fma(w0, a0.unsafe_load[width=width]()))
                        a1.unsafe_store(xv.fma(w1, a1.unsafe_load[width=width]()))
                    k += width
            # The values after the last whole vector; a block's odd last row
            # entirely (k is still 0 for it).
            for c in range(live):
                comptime for m in range(count):
                    var total = Scalar[dtype](0)
                    if live == pair:
                        total = acc.unsafe_offset((m * pair + c) * width).unsafe_load[width=width]().reduce_add()
                    for t in range(k, k_len):
                        total += x.unsafe_offset(m * k_len + t).unsafe_load() * w.unsafe_offset((n + c) * k_len + t).unsafe_load()
                    result.unsafe_offset(m * n_len + n + c).unsafe_store(total)
            n += pair

    if n_len > 0:
        parallelize(dot_rows, ceildiv(n_len, block))


def _rows_times_kn_weight[
    dtype: DType, //, count: Int
](
    result: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    w: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    n_len: Int,
    k_len: Int,
) raises:
    """result[0:count] = x[0:count] @ W: each task sums its slice of K into
    partial[task], then the slices' sums are added up tile by tile."""
    comptime width = simd_width_of[dtype]()
    # Two vectors of columns at a time: count * 2 accumulators, with the two
    # weight vectors and a broadcast, within AVX-512's 32 vector registers.
    comptime vectors = 2
    comptime step = vectors * width
    # count is at most _BLOCK_ROWS (8): 512 columns or more, whole vector steps.
    comptime tile = _TILE_VALUES // count // step * step
    # Two slices a core, so that a slow core holds the rest up less.
    var parts = max(1, min(2 * num_physical_cores(), k_len // _MIN_SLICE))
    var k_chunk = max(1, ceildiv(k_len, parts))
    parts = max(1, ceildiv(k_len, k_chunk))
    var partial = unsafe_alloc[Scalar[dtype]](max(1, parts * count * n_len))

    def sum_slice(part: Int) {var}:
        var k0 = part * k_chunk
        var k1 = min(k_len, k0 + k_chunk)
        var mine = partial.unsafe_offset(part * count * n_len)
        var acc = stack_allocation[count * step, dtype]()
        var t0 = 0
        while t0 < n_len:
            var t1 = min(n_len, t0 + tile)
            comptime for m in range(count):
                for n in range(t0, t1):
                    mine.unsafe_offset(m * n_len + n).unsafe_store(Scalar[dtype](0))
            var k = k0
            while k < k1:
                var depth = min(_DEPTH, k1 - k)
                var ahead = k + _AHEAD * _DEPTH
                var n = t0
                while n + step <= t1:
                    comptime for m in range(count):
                        comptime for v in range(vectors):
                            acc.unsafe_offset((m * vectors + v) * width).unsafe_store(
                                mine.unsafe_offset(m * n_len + n + v * width).unsafe_load[width=width]()
                            )
                    if ahead + depth <= k1:
                        for d in range(depth):
                            var far = w.unsafe_offset((ahead + d) * n_len + n)
                            comptime for v in range(vectors):
                                prefetch(far.unsafe_offset(v * width))
                    for d in range(depth):
                        var row = w.unsafe_offset((k + d) * n_len + n)
                        var wv = stack_allocation[step, dtype]()
                        comptime for v in range(vectors):
                            wv.unsafe_offset(v * width).unsafe_store(
                                row.unsafe_offset(v * width).unsafe_load[width=width]()
                            )
                        comptime for m in range(count):
                            var xs = SIMD[dtype, width](x.unsafe_offset(m * k_len + k + d).unsafe_load())
                            comptime for v in range(vectors):
                                var a = acc.unsafe_offset((m * vectors + v) * width)
                                a.unsafe_store(
                                    xs.fma(
                                        wv.unsafe_offset(v * width).unsafe_load[width=width](),
                                        a.unsafe_load[width=width](),
                                    )
                                )
                    comptime for m in range(count):
                        comptime for v in range(vectors):
                            mine.unsafe_offset(m * n_len + n + v * width).unsafe_store(
                                acc.unsafe_offset((m * vectors + v) * width).unsafe_load[width=width]()
                            )
                    n += step
                # The tile's last columns, fewer than two vectors: one at a time.
                while n < t1:
                    for d in range(depth):
                        var wk = w.unsafe_offset((k + d) * n_len + n).unsafe_load()
                        comptime for m in range(count):
                            var p = mine.unsafe_offset(m * n_len + n)
                            p.unsafe_store(p.unsafe_load() + x.unsafe_offset(m * k_len + k + d).unsafe_load() * wk)
                    n += 1
                k += depth
            t0 = t1

    parallelize(sum_slice, parts)
    var tiles = ceildiv(n_len, tile)

    def add_slices(t: Int) {var}:
        var n0 = t * tile
        var n1 = min(n_len, n0 + tile)
        comptime for m in range(count):
            for n in range(n0, n1):
                var total = partial.unsafe_offset(m * n_len + n).unsafe_load()
                for part in range(1, parts):
                    total += partial.unsafe_offset((part * count + m) * n_len + n).unsafe_load()
                result.unsafe_offset(m * n_len + n).unsafe_store(total)

    if tiles > 0:
        parallelize(add_slices, tiles)
    partial.unsafe_free()
