# Products of a few rows with a large weight on CPU: decode steps' Linear and
# Conv1D layers. Such a product reads every weight element once and does a
# few multiply-adds with it, so its speed is the speed at which the weight is
# streamed from memory. MAX's matmul streams a weight at about half the
# memory's speed for one to eight rows, and a weight stored [K, N] at a
# fraction of that for some shapes (benchmarks/gemm.py, docs/benchmarks.md).
# Here each weight row is read front to back, once, by one task.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.memory import stack_allocation
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.sys.info import num_physical_cores
from std.utils.index import IndexList

# Columns of a [K, N] weight one task owns: its partial sums for every row
# (rows * columns values) stay within the core's first-level cache.
comptime _TILE_VALUES = 8192
# Rows per pass over the weight when the number of rows is known only at run
# time: the most the lowering sends with a known number.
comptime _BLOCK_ROWS = 8


@extensibility.register("torch_max_backend_skinny_matmul")
struct SkinnyMatmul:
    """`output[rows, N] = x[rows, K] @ W` for a few rows, W stored [K, N], or
    [N, K] when `weight_nk` is set (a Linear's weight, read transposed).

    [N, K]: each task takes a block of W's rows; an output column is the dot
    product of that row with each of x's rows, accumulated in registers.
    [K, N]: each task takes a block of W's rows (a slice of K) times a tile of
    its columns and accumulates partial sums for its slice; the slices' sums
    are added at the end. The input's rows are read as broadcast scalars.
    `rows` 0: the rows are counted at run time (a symbolic batch) and done
    `_BLOCK_ROWS` at a time, each block streaming the weight once.
    """

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
        comptime assert target == "cpu", "torch_max_backend_skinny_matmul runs on CPU"
        comptime width = simd_width_of[dtype]()
        var k_len = x.dim_size(1)
        var n_len = output.dim_size(1)
        # A few tasks a core, so that a slow core does not hold the rest up.
        var tasks = 4 * num_physical_cores()

        def rows_from[count: Int](first: Int) {var}:
            """output[first : first + count] = x[first : first + count] @ W."""
            comptime if weight_nk:
                var block = max(1, ceildiv(n_len, tasks))

                def dot_rows(task: Int) {var}:
                    var acc = stack_allocation[count * width, dtype]()
                    for n in range(task * block, min(n_len, (task + 1) * block)):
                        comptime for m in range(count):
                            acc.unsafe_offset(m * width).unsafe_store(SIMD[dtype, width](0))
                        var k = 0
                        while k + width <= k_len:
                            var wv = w.load[width](IndexList[2](n, k))
                            comptime for m in range(count):
                                var a = acc.unsafe_offset(m * width)
                                a.unsafe_store(
                                    a.unsafe_load[width=width]()
                                    + x.load[width](IndexList[2](first + m, k)) * wv
                                )
                            k += width
                        comptime for m in range(count):
                            var total = acc.unsafe_offset(m * width).unsafe_load[
                                width=width
                            ]().reduce_add()
                            for tail in range(k, k_len):
                                total += x.load[1](IndexList[2](first + m, tail)) * w.load[1](
                                    IndexList[2](n, tail)
                                )
                            output.store[1](IndexList[2](first + m, n), total)

                parallelize(dot_rows, ceildiv(n_len, block))
            else:
                var tile = max(
                    width,
                    min(ceildiv(n_len, width), _TILE_VALUES // count // width) * width,
                )
                var n_tiles = ceildiv(n_len, tile)
                var k_parts = max(1, min(ceildiv(tasks, n_tiles), k_len // 64))
                var k_chunk = ceildiv(k_len, k_parts)
                k_parts = ceildiv(k_len, k_chunk)
                # partial[part, m, n]: row m's sum over slice `part` of K.
                var partial = unsafe_alloc[Scalar[dtype]](k_parts * count * n_len)

                @always_inline
                def add_rows[
                    vector: Int, depth: Int
                ](m: Int, k: Int, n0: Int, n1: Int) {var} -> Int:
                    """partial[part of k, m, n0:n1] += x[m, k:k+depth] @ W[k:k+depth, n0:n1],
                    `vector` columns at a time; returns the first column not done."""
                    var acc = partial.unsafe_offset(((k // k_chunk) * count + m) * n_len)
                    var a = stack_allocation[depth, dtype]()
                    comptime for d in range(depth):
                        a.unsafe_offset(d).unsafe_store(x.load[1](IndexList[2](first + m, k + d)))
                    var n = n0
                    while n + vector <= n1:
                        var total = acc.unsafe_offset(n).unsafe_load[width=vector]()
                        comptime for d in range(depth):
                            total += SIMD[dtype, vector](
                                a.unsafe_offset(d).unsafe_load()
                            ) * w.load[vector](IndexList[2](k + d, n))
                        acc.unsafe_offset(n).unsafe_store(total)
                        n += vector
                    return n

                def slice_times_tile(task: Int) {var}:
                    var part = task // n_tiles
                    var n0 = (task % n_tiles) * tile
                    var n1 = min(n_len, n0 + tile)
                    var k1 = min(k_len, (part + 1) * k_chunk)
                    for m in range(count):
                        var acc = partial.unsafe_offset((part * count + m) * n_len)
                        for n in range(n0, n1):
                            acc.unsafe_offset(n).unsafe_store(Scalar[dtype](0))
                    var k = part * k_chunk
                    # Four weight rows at a time: each partial sum is loaded and
                    # stored once for four multiply-adds. For one input row whose
                    # task's slice spans whole weight rows (one tile), one weight
                    # row at a time, a single stream through memory: GPT-2's 48
                    # decode products (768 to 3072 columns) took 5-15 % less time
                    # so, and an LM head's 50257 columns (seven tiles) a quarter
                    # more (AMD EPYC Zen 4, 2026-11-28).
                    if count > 1 or n_tiles > 1:
                        while k + 4 <= k1:
                            comptime for m in range(count):
                                var n = add_rows[width, 4](m, k, n0, n1)
                                _ = add_rows[1, 4](m, k, n, n1)
                            k += 4
                    while k < k1:
                        comptime for m in range(count):
                            var n = add_rows[width, 1](m, k, n0, n1)
                            _ = add_rows[1, 1](m, k, n, n1)
                        k += 1

                parallelize(slice_times_tile, k_parts * n_tiles)

                def sum_slices(t: Int) {var}:
                    var n0 = t * tile
                    var n1 = min(n_len, n0 + tile)
                    for m in range(count):
                        for n in range(n0, n1):
                            var total = partial.unsafe_offset(m * n_len + n).unsafe_load()
                            for part in range(1, k_parts):
                                total += partial.unsafe_offset(
                                    (part * count + m) * n_len + n
                                ).unsafe_load()
                            output.store[1](IndexList[2](first + m, n), total)

                parallelize(sum_slices, n_tiles)
                partial.unsafe_free()

        comptime if rows > 0:
            rows_from[rows](0)
        else:
            # Rows known only at run time (a symbolic batch): blocks of
            # _BLOCK_ROWS, each streaming the weight once, then the rest.
            var total = x.dim_size(0)
            var first = 0
            while total - first >= _BLOCK_ROWS:
                rows_from[_BLOCK_ROWS](first)
                first += _BLOCK_ROWS
            comptime for left in range(1, _BLOCK_ROWS):
                if total - first == left:
                    rows_from[left](first)
