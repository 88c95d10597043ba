# A float32 product `x[M, K] @ W` on the CPU from register tiles: each task
# keeps a tile of the output in vector registers while it runs along K, so
# every value of x and W it loads feeds several multiply-adds. MAX's matmul
# kernel costs a graph about 50 CPU seconds of compile the first time a graph
# holds one (docs/benchmarks.md, "What one more kernel costs"); this kernel
# compiles in seconds. A product alone runs as fast as on MAX's matmul, a
# training step about 5 % slower, since MAX fuses the elementwise work
# around its own matmul and not around a custom kernel (docs/benchmarks.md,
# "The tiled kernel"), so only product_strategy="tiled" asks for it.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.memory import stack_allocation
from std.memory.alloc import unsafe_alloc
from std.sys import simd_width_of
from std.sys.info import num_physical_cores

# A tile's accumulators: 6 rows of 4 vectors (2 on AVX2), which with the
# vectors loaded each step fill the 32 vector registers of AVX-512 (the 16
# of AVX2). W [K, N]: 6 rows of x times 4 vectors of W's columns. W [N, K]:
# 4 vectors of x's rows (x packed transposed) times 6 of W's rows.
comptime _ROWS = 6
# W [N, K]: output columns a task gathers before writing them out (8 tiles).
comptime _STAGE = 8 * _ROWS


@extensibility.register("torch_max_backend_tiled_matmul")
struct TiledMatmul:
    """`output[M, N] = x[M, K] @ W`, W stored [K, N], or [N, K] when
    `weight_nk` is set (a Linear's weight, read transposed); x stored
    [M, K], or [K, M] when `x_km` is set (a weight gradient's `dY^T @ X`
    reads dY transposed). Both dense row-major as stored (MAX hands a custom
    kernel its operands so)."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
        weight_nk: Bool,
        x_km: Bool,
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
        var k_len = x.dim_size(0) if x_km else x.dim_size(1)
        if m_len == 0 or n_len == 0:
            return
        # The tiles read rows by pointer: a strided operand would be misread.
        var k_stride = x.strides()[1] == 1 and w.strides()[1] == 1
        if not k_stride or x.strides()[0] != x.dim_size(1) or w.strides()[0] != w.dim_size(1):
            raise Error("torch_max_backend_tiled_matmul: operands must be dense and row-major")
        comptime if weight_nk:
            _row_tiles[x_km](output.unsafe_ptr(), x.unsafe_ptr(), w.unsafe_ptr(), m_len, n_len, k_len)
        else:
            _outer_tiles[x_km](output.unsafe_ptr(), x.unsafe_ptr(), w.unsafe_ptr(), m_len, n_len, k_len)


def _outer_tiles[
    dtype: DType, //, x_km: Bool
](
    result: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    w: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    m_len: Int,
    n_len: Int,
    k_len: Int,
) raises:
    """W [K, N]: a tile is _ROWS output rows times a panel of W's columns; at
    each k it adds x[rows, k] (broadcast) times W[k, panel]. A task copies
    each of its panels once as [k][columns] (zero-padded), so every row
    block reads it front to back. x is read along its rows where it lies; x
    stored [K, M] is first copied as [row block][k][_ROWS] (its rows' k-th
    values a row of x^T apart would each take a cache line)."""
    comptime width = simd_width_of[dtype]()
    comptime vectors = 4 if width >= 16 else 2
    comptime cols = vectors * width
    var blocks = ceildiv(m_len, _ROWS)
    var panels = ceildiv(n_len, cols)
    var tasks = min(panels, num_physical_cores())
    var per_task = ceildiv(panels, tasks)
    var xp = x
    var packed = unsafe_alloc[Scalar[dtype]](max(1, blocks * k_len * _ROWS) if x_km else 1)
    comptime if x_km:
        var pack_tasks = min(blocks, num_physical_cores())
        var blocks_per_task = ceildiv(blocks, pack_tasks)

        def pack(task: Int) {var}:
            var first = task * blocks_per_task
            var last = min(blocks, first + blocks_per_task)
            for k in range(k_len):
                var row = x.unsafe_offset(k * m_len)
                for block in range(first, last):
                    var dst = packed.unsafe_offset((block * k_len + k) * _ROWS)
                    comptime for i in range(_ROWS):
                        var m = block * _ROWS + i
                        dst.unsafe_offset(i).unsafe_store(
                            row.unsafe_offset(m).unsafe_load() if m < m_len else Scalar[dtype](0)
                        )

        parallelize(pack, pack_tasks)
        xp = rebind[UnsafePointer[Scalar[dtype], ImmutAnyOrigin]](packed)
    # Where x's (m, k) lies: row m's start plus k, or the packed block's.
    comptime k_step = _ROWS if x_km else 1

    def run_panels(task: Int) {var}:
        var panel = unsafe_alloc[Scalar[dtype]](max(1, k_len * cols))
        var x_rows = stack_allocation[_ROWS, Int]()
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
                var m0 = block * _ROWS
                # Rows past the edge repeat the last row and are not stored.
                comptime for i in range(_ROWS):
                    x_rows.unsafe_offset(i).unsafe_store(
                        m0 * k_len + i if x_km else min(m0 + i, m_len - 1) * k_len
                    )
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
                        var at = x_rows.unsafe_offset(i).unsafe_load() + k * k_step
                        var xv = SIMD[dtype, width](xp.unsafe_offset(at).unsafe_load())
                        comptime for j in range(vectors):
                            var a = acc.unsafe_offset((i * vectors + j) * width)
                            a.unsafe_store(
                                xv.fma(
                                    wk.unsafe_offset(j * width).unsafe_load[width=width](),
                                    a.unsafe_load[width=width](),
                                )
                            )
                var rows = min(_ROWS, m_len - m0)
                comptime for i in range(_ROWS):
                    if i < rows:
                        var dst = result.unsafe_offset((m0 + i) * n_len + n0)
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
    packed.unsafe_free()


def _row_tile[
    dtype: DType, vectors: Int, stride: Int
](
    stage: UnsafePointer[Scalar[dtype], MutUntrackedOrigin],
    xs: UnsafePointer[Scalar[dtype], MutUntrackedOrigin],
    w_rows: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    column: Int,
    first: Int,
    k_len: Int,
):
    """`vectors` vectors of x's rows (packed [k][stride]) times _ROWS rows of
    W from `w_rows` on: at each k, W[n, k] broadcast times x^T[k, rows].
    Each accumulator holds one output column's rows; the columns from
    `first` on go to `stage` ([stride rows][_STAGE columns], from `column`
    on), one value at a time."""
    comptime width = simd_width_of[dtype]()
    var acc = stack_allocation[_ROWS * vectors * width, dtype]()
    comptime for t in range(_ROWS * vectors):
        acc.unsafe_offset(t * width).unsafe_store(SIMD[dtype, width](0))
    var xk = stack_allocation[vectors * width, dtype]()
    for k in range(k_len):
        comptime for v in range(vectors):
            xk.unsafe_offset(v * width).unsafe_store(
                xs.unsafe_offset(k * stride + v * width).unsafe_load[width=width]()
            )
        comptime for j in range(_ROWS):
            var wv = SIMD[dtype, width](w_rows.unsafe_offset(j * k_len + k).unsafe_load())
            comptime for v in range(vectors):
                var a = acc.unsafe_offset((j * vectors + v) * width)
                a.unsafe_store(
                    wv.fma(
                        xk.unsafe_offset(v * width).unsafe_load[width=width](),
                        a.unsafe_load[width=width](),
                    )
                )
    comptime for j in range(_ROWS):
        if j >= first:
            comptime for v in range(vectors):
                var vec = acc.unsafe_offset((j * vectors + v) * width).unsafe_load[width=width]()
                comptime for lane in range(width):
                    stage.unsafe_offset((v * width + lane) * _STAGE + column + j).unsafe_store(vec[lane])


def _row_tiles[
    dtype: DType, //, x_km: Bool
](
    result: UnsafePointer[Scalar[dtype], MutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    w_given: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    m_len: Int,
    n_len: Int,
    k_len: Int,
) raises:
    """W [N, K]: vectors run along x's rows, so W is read where it lies, each
    of its rows front to back, and only x (the small operand) is packed:
    transposed, as [row block][k][block rows], zero-padded. A W of fewer
    than _ROWS rows is copied into a zero-padded one first."""
    comptime width = simd_width_of[dtype]()
    comptime vectors = 4 if width >= 16 else 2
    comptime block_rows = vectors * width
    var m_blocks = ceildiv(m_len, block_rows)
    var n_blocks = ceildiv(n_len, _ROWS)
    var packed = unsafe_alloc[Scalar[dtype]](max(1, m_blocks * k_len * block_rows))
    var w = w_given
    var w_count = n_len
    var padded = unsafe_alloc[Scalar[dtype]](max(1, _ROWS * k_len) if n_len < _ROWS else 1)
    if n_len < _ROWS:
        for i in range(_ROWS * k_len):
            padded.unsafe_offset(i).unsafe_store(
                w_given.unsafe_offset(i).unsafe_load() if i < n_len * k_len else Scalar[dtype](0)
            )
        w = rebind[UnsafePointer[Scalar[dtype], ImmutAnyOrigin]](padded)
        w_count = _ROWS
    var cores = num_physical_cores()
    # Packing runs along k (reads stay in a few lines of each row, writes
    # are contiguous); the tasks share it by ranges of k within each block.
    var pack_tasks = max(1, min(cores, k_len))
    var k_per_task = ceildiv(k_len, pack_tasks)

    # x's element (m, k): along its row, or along row k of x^T.
    var m_step = 1 if x_km else k_len
    var k_step = m_len if x_km else 1

    def pack(task: Int) {var}:
        for block in range(m_blocks):
            var dst = packed.unsafe_offset(block * k_len * block_rows)
            var m0 = block * block_rows
            var rows = min(block_rows, m_len - m0)
            var src = x.unsafe_offset(m0 * m_step)
            for k in range(task * k_per_task, min(k_len, (task + 1) * k_per_task)):
                if rows == block_rows:
                    comptime for i in range(block_rows):
                        dst.unsafe_offset(k * block_rows + i).unsafe_store(
                            src.unsafe_offset(i * m_step + k * k_step).unsafe_load()
                        )
                else:
                    for i in range(block_rows):
                        dst.unsafe_offset(k * block_rows + i).unsafe_store(
                            src.unsafe_offset(i * m_step + k * k_step).unsafe_load() if i < rows else Scalar[dtype](0)
                        )

    parallelize(pack, pack_tasks)
    var groups = ceildiv(n_blocks, _STAGE // _ROWS)
    var tasks = min(cores, groups)
    var per_task = ceildiv(groups, tasks)

    def run(task: Int) {var}:
        # A tile's outputs are columns: written straight into the result
        # they would land on one line per row, rows a whole output row
        # apart, which the caches' sets hold few of; they are gathered here
        # first, _STAGE columns wide, and copied out a row at a time.
        var stage = stack_allocation[block_rows * _STAGE, dtype]()
        for group in range(task * per_task, min(groups, (task + 1) * per_task)):
            var g0 = group * _STAGE
            var g_end = min(n_len, g0 + _STAGE)
            var count = g_end - g0
            for block in range(m_blocks):
                var xs = packed.unsafe_offset(block * k_len * block_rows)
                var m0 = block * block_rows
                var rows = min(block_rows, m_len - m0)
                var live = ceildiv(rows, width)
                var n_block = group * (_STAGE // _ROWS)
                while n_block * _ROWS < g_end:
                    # The last block steps back to stay whole; what it
                    # repeats is not stored again.
                    var n0 = min(n_block * _ROWS, w_count - _ROWS)
                    var first = n_block * _ROWS - n0
                    comptime for v in range(1, vectors + 1):
                        if live == v:
                            _row_tile[dtype, v, block_rows](
                                stage, xs, w.unsafe_offset(n0 * k_len), n0 - g0, first, k_len
                            )
                    n_block += 1
                for i in range(rows):
                    var src = stage.unsafe_offset(i * _STAGE)
                    var dst = result.unsafe_offset((m0 + i) * n_len + g0)
                    if count == _STAGE:
                        comptime for c in range(_STAGE // width):
                            dst.unsafe_offset(c * width).unsafe_store(
                                src.unsafe_offset(c * width).unsafe_load[width=width]()
                            )
                    else:
                        for c in range(count):
                            dst.unsafe_offset(c).unsafe_store(src.unsafe_offset(c).unsafe_load())

    parallelize(run, tasks)
    packed.unsafe_free()
    padded.unsafe_free()
