# A float32 product of a few rows with a weight stored [K, N] on the CPU (the
# Conv1D layers of GPT-2-style models, `x @ W` in user code), at the speed
# the weight streams from memory. Such a product reads every weight element
# once for a few multiply-adds, so in a model whose weights do not fit the
# CPU's cache its time is the time to bring the weight in. Read in tiles of
# a few rows, a [K, N] weight is a stride of short runs, which the CPU's own
# prefetchers barely follow: MAX's matmul, MKL and our skinny kernel read
# such weights at 9-11 GB/s at 8 rows where `torch.sum` reads 16-19 GB/s
# (Intel Xeon, 2 cores; docs/benchmarks.md, "Products that stream their
# weights"). Here each task owns a slice of K, so that its weight rows are
# one contiguous region, runs over it in column tiles whose partial sums
# stay in the first-level cache, and asks for the rows it will read next
# (`_AHEAD` row groups on) while it multiplies the current ones.

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

# Columns of a tile: a task's partial sums for every row (rows * columns
# values, 16 KiB at 8 rows) stay within the first-level cache.
comptime _TILE = 512
# Weight rows multiplied per pass over a tile's partial sums.
comptime _DEPTH = 4
# How many row groups ahead the prefetches run (8 weight rows).
comptime _AHEAD = 2
# The most rows one pass over the weight serves; more rows (a symbolic batch
# larger than its capture) take further passes.
comptime _BLOCK_ROWS = 8
# A task's slice of K has at least this many rows.
comptime _MIN_SLICE = 32


@extensibility.register("torch_max_backend_streamed_matmul")
struct StreamedMatmul:
    """`output[rows, N] = x[rows, K] @ W`, W stored [K, N], dense row-major;
    `rows` 0: counted at run time and done `_BLOCK_ROWS` at a time."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
        rows: Int,
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
        if not dense or x.strides()[0] != k_len or w.strides()[0] != n_len or output.strides()[0] != n_len:
            raise Error("torch_max_backend_streamed_matmul: operands must be dense and row-major")
        var xp = x.unsafe_ptr()
        var wp = w.unsafe_ptr()
        var op = output.unsafe_ptr()
        comptime if rows > 0:
            _rows_times_weight[rows](op, xp, wp, n_len, k_len)
        else:
            var total = x.dim_size(0)
            var first = 0
            while total - first >= _BLOCK_ROWS:
                _rows_times_weight[_BLOCK_ROWS](
                    op.unsafe_offset(first * n_len), xp.unsafe_offset(first * k_len), wp, n_len, k_len
                )
                first += _BLOCK_ROWS
            comptime for left in range(1, _BLOCK_ROWS):
                if total - first == left:
                    _rows_times_weight[left](
                        op.unsafe_offset(first * n_len), xp.unsafe_offset(first * k_len), wp, n_len, k_len
                    )


def _rows_times_weight[
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
            var t1 = min(n_len, t0 + _TILE)
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
    var tiles = ceildiv(n_len, _TILE)

    def add_slices(tile: Int) {var}:
        var n0 = tile * _TILE
        var n1 = min(n_len, n0 + _TILE)
        comptime for m in range(count):
            for n in range(n0, n1):
                var total = partial.unsafe_offset(m * n_len + n).unsafe_load()
                for part in range(1, parts):
                    total += partial.unsafe_offset((part * count + m) * n_len + n).unsafe_load()
                result.unsafe_offset(m * n_len + n).unsafe_store(total)

    if tiles > 0:
        parallelize(add_slices, tiles)
    partial.unsafe_free()
