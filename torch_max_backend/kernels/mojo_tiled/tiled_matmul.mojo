# A float32 product `x[M, K] @ W` on the CPU from register tiles: each task
# keeps a tile of the output in vector registers while it runs along K, so
# every value of x and W it loads feeds several multiply-adds. MAX's matmul
# kernel costs a graph about 50 CPU seconds of compile the first time a graph
# holds one (docs/benchmarks.md, "What one more kernel costs"); this kernel
# compiles in seconds. A product alone runs about as fast as on MAX's
# matmul, a training step 8-15 % slower (docs/benchmarks.md, "The tiled
# kernel"), so only product_strategy="tiled" asks for it.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.memory import stack_allocation
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.sys.info import num_physical_cores

# W stored [K, N]: output rows a tile holds (each a few vectors wide), and
# the rows x 4 (or x 2) accumulators plus four loaded W vectors fit the 32
# vector registers of AVX-512 (the 16 of AVX2 with two vectors a row).
comptime _ROWS = 6
# W stored [N, K]: a tile is x's rows times W's rows, each pair a dot
# product accumulated one vector of K at a time.
comptime _DOT_ROWS = 4
comptime _DOT_COLS = 6


@extensibility.register("torch_max_backend_tiled_matmul")
struct TiledMatmul:
    """`output[M, N] = x[M, K] @ W`, W stored [K, N], or [N, K] when
    `weight_nk` is set (a Linear's weight, read transposed). x and W are
    dense row-major (MAX hands a custom kernel its operands so)."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
        weight_nk: Bool,
        target: StaticString,
    ](
        output: OutputTensor[dtype=dtype, rank=2, ...],
        x: InputTensor[dtype=dtype, rank=2, ...],
        w: InputTensor[dtype=dtype, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_tiled_matmul runs on CPU"
        var m_len = output.dim_size(0)
        var n_len = output.dim_size(1)
        var k_len = x.dim_size(1)
        if m_len == 0 or n_len == 0:
            return
        # The tiles read rows by pointer: a strided operand would be misread.
        var k_stride = x.strides()[1] == 1 and w.strides()[1] == 1
        if not k_stride or x.strides()[0] != k_len or w.strides()[0] != w.dim_size(1):
            raise Error("torch_max_backend_tiled_matmul: operands must be dense and row-major")
        comptime if weight_nk:
            _dot_tiles(output.unsafe_ptr(), x.unsafe_ptr(), w.unsafe_ptr(), m_len, n_len, k_len)
        else:
            _outer_tiles(output.unsafe_ptr(), x.unsafe_ptr(), w.unsafe_ptr(), m_len, n_len, k_len)


def _outer_tiles[
    dtype: DType
](
    result: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    w: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    m_len: Int,
    n_len: Int,
    k_len: Int,
) raises:
    """W [K, N]: a tile is _ROWS output rows times a panel of W's columns; at
    each k it adds x[rows, k] (broadcast) times W[k, panel]. x is packed once
    as [row block][k][_ROWS] and each panel as [k][columns], both zero-padded,
    so the inner loop reads both front to back."""
    comptime width = simd_width_of[dtype]()
    comptime vectors = 4 if width >= 16 else 2
    comptime cols = vectors * width
    var blocks = ceildiv(m_len, _ROWS)
    var panels = ceildiv(n_len, cols)
    var packed_x = unsafe_alloc[Scalar[dtype]](max(1, blocks * k_len * _ROWS))
    var x_tasks = min(blocks, num_physical_cores())
    var x_per_task = ceildiv(blocks, x_tasks)

    def pack_x(task: Int) {var}:
        for block in range(task * x_per_task, min(blocks, (task + 1) * x_per_task)):
            var dst = packed_x.unsafe_offset(block * k_len * _ROWS)
            for i in range(_ROWS):
                var m = block * _ROWS + i
                var row = x.unsafe_offset(m * k_len)
                for k in range(k_len):
                    dst.unsafe_offset(k * _ROWS + i).unsafe_store(
                        row.unsafe_offset(k).unsafe_load() if m < m_len else Scalar[dtype](0)
                    )

    parallelize(pack_x, x_tasks)
    var tasks = min(panels, num_physical_cores())
    var per_task = ceildiv(panels, tasks)

    def run_panels(task: Int) {var}:
        var panel = unsafe_alloc[Scalar[dtype]](max(1, k_len * cols))
        for p in range(task * per_task, min(panels, (task + 1) * per_task)):
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
            for block in range(blocks):
                var xs = packed_x.unsafe_offset(block * k_len * _ROWS)
                var acc = stack_allocation[_ROWS * cols, dtype]()
                comptime for t in range(_ROWS * vectors):
                    acc.unsafe_offset(t * width).unsafe_store(SIMD[dtype, width](0))
                for k in range(k_len):
                    var wk = stack_allocation[cols, dtype]()
                    comptime for j in range(vectors):
                        wk.unsafe_offset(j * width).unsafe_store(
                            panel.unsafe_offset(k * cols + j * width).unsafe_load[width=width]()
                        )
                    comptime for i in range(_ROWS):
                        var xv = SIMD[dtype, width](xs.unsafe_offset(k * _ROWS + i).unsafe_load())
                        comptime for j in range(vectors):
                            var a = acc.unsafe_offset((i * vectors + j) * width)
                            a.unsafe_store(
                                xv.fma(
                                    wk.unsafe_offset(j * width).unsafe_load[width=width](),
                                    a.unsafe_load[width=width](),
                                )
                            )
                var rows = min(_ROWS, m_len - block * _ROWS)
                comptime for i in range(_ROWS):
                    if i < rows:
                        var dst = result.unsafe_offset((block * _ROWS + i) * n_len + n0)
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

    parallelize(run_panels, tasks)
    packed_x.unsafe_free()


def _dot_tiles[
    dtype: DType
](
    result: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    w: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    m_len: Int,
    n_len: Int,
    k_len: Int,
) raises:
    """W [N, K]: a tile is _DOT_ROWS rows of x times _DOT_COLS rows of W, both
    read along K where they lie (no packing); each output is a vector of
    partial sums added up at the end. Rows past the edge repeat the last row
    and are not stored."""
    comptime width = simd_width_of[dtype]()
    comptime pairs = _DOT_ROWS * _DOT_COLS
    var blocks = ceildiv(n_len, _DOT_COLS)
    var tasks = min(blocks, num_physical_cores())
    var per_task = ceildiv(blocks, tasks)
    var k_vec = k_len - k_len % width

    def run_blocks(task: Int) {var}:
        for block in range(task * per_task, min(blocks, (task + 1) * per_task)):
            var n0 = block * _DOT_COLS
            var m0 = 0
            while m0 < m_len:
                var acc = stack_allocation[pairs * width, dtype]()
                comptime for t in range(pairs):
                    acc.unsafe_offset(t * width).unsafe_store(SIMD[dtype, width](0))
                var xr = stack_allocation[_DOT_ROWS, Int]()
                var wr = stack_allocation[_DOT_COLS, Int]()
                comptime for i in range(_DOT_ROWS):
                    xr.unsafe_offset(i).unsafe_store(min(m0 + i, m_len - 1) * k_len)
                comptime for j in range(_DOT_COLS):
                    wr.unsafe_offset(j).unsafe_store(min(n0 + j, n_len - 1) * k_len)
                var k = 0
                while k < k_vec:
                    var wv = stack_allocation[_DOT_COLS * width, dtype]()
                    comptime for j in range(_DOT_COLS):
                        wv.unsafe_offset(j * width).unsafe_store(
                            w.unsafe_offset(wr.unsafe_offset(j).unsafe_load() + k).unsafe_load[width=width]()
                        )
                    comptime for i in range(_DOT_ROWS):
                        var xv = x.unsafe_offset(xr.unsafe_offset(i).unsafe_load() + k).unsafe_load[
                            width=width
                        ]()
                        comptime for j in range(_DOT_COLS):
                            var a = acc.unsafe_offset((i * _DOT_COLS + j) * width)
                            a.unsafe_store(
                                xv.fma(
                                    wv.unsafe_offset(j * width).unsafe_load[width=width](),
                                    a.unsafe_load[width=width](),
                                )
                            )
                    k += width
                comptime for i in range(_DOT_ROWS):
                    if m0 + i < m_len:
                        comptime for j in range(_DOT_COLS):
                            if n0 + j < n_len:
                                var total = acc.unsafe_offset(
                                    (i * _DOT_COLS + j) * width
                                ).unsafe_load[width=width]().reduce_add()
                                var xrow = x.unsafe_offset((m0 + i) * k_len)
                                var wrow = w.unsafe_offset((n0 + j) * k_len)
                                for tail in range(k_vec, k_len):
                                    total += xrow.unsafe_offset(tail).unsafe_load() * wrow.unsafe_offset(
                                        tail
                                    ).unsafe_load()
                                result.unsafe_offset((m0 + i) * n_len + n0 + j).unsafe_store(total)
                m0 += _DOT_ROWS

    parallelize(run_blocks, tasks)
