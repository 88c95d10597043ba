# A bfloat16 product `x[M, K] @ W` on the CPU's bfloat16 pair dot products
# (AVX512-BF16's `vdpbf16ps`: 16 float32 sums, each gaining two products of
# bfloat16 pairs an instruction, twice float32's multiply-adds). MAX's matmul
# and MKL compute a bfloat16 product in float32 on the AMD EPYC and ran 2.3-2.5x
# slower than eager's oneDNN, which uses these instructions
# (docs/benchmarks.md, "Half-precision products on the CPU").
#
# Each task copies a panel of W's columns as pairs, [k / 2][columns][2] (the
# layout the instruction reads: one vector is 16 columns' pairs), then runs
# tiles of output rows along it, each tile's sums in vector registers; a
# row's pair (x[m, k], x[m, k + 1]) is one 32-bit value broadcast. The sums
# are float32, the bias joins them, and each output is rounded once to
# bfloat16, to nearest, ties to even, as torch rounds.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.memory import bitcast, stack_allocation
from std.memory.alloc import unsafe_alloc
from std.sys.info import num_physical_cores

from .pair_rows import pair_rows
from .pairs import LANES as _LANES
from .pairs import F32x16, pair_dot, rounded, transpose16
from .row_dots import FEW_ROWS, few_rows

# A tile: 6 rows of 4 vectors of 16 float32 sums (24 of the 32 registers,
# with the 4 panel vectors loaded each step and a broadcast pair).
comptime _ROWS = 6
comptime _VECTORS = 4
comptime _COLS = _VECTORS * _LANES

@extensibility.register("torch_max_backend_paired_matmul")
struct PairedMatmul:
    """`output[M, N] = x[M, K] @ W (+ bias[N])` for bfloat16 operands, summed
    in float32 and rounded once, W stored [K, N], or [N, K] when `weight_nk`
    is set (a Linear's weight). Operands may be strided views; an empty bias
    is none."""

    @staticmethod
    def execute[
        weight_nk: Bool,
        x_km: Bool,
        target: StaticString,
    ](
        output: OutputTensor[dtype=DType.bfloat16, rank=2, ...],
        x: InputTensor[dtype=DType.bfloat16, rank=2, ...],
        w: InputTensor[dtype=DType.bfloat16, rank=2, ...],
        bias: InputTensor[dtype=DType.bfloat16, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_paired_matmul runs on CPU"
        # x's element (m, k): x stored [M, K], or [K, M] when `x_km` is set
        # (a weight gradient's dY^T handed over as the dY stored).
        var m_len = x.dim_size(1) if x_km else x.dim_size(0)
        var k_len = x.dim_size(0) if x_km else x.dim_size(1)
        var x_m = x.strides()[1] if x_km else x.strides()[0]
        var x_k = x.strides()[0] if x_km else x.strides()[1]
        var n_len = output.dim_size(1)
        if m_len == 0 or n_len == 0:
            return
        if output.strides()[1] != 1 or output.strides()[0] != n_len:
            raise Error("torch_max_backend_paired_matmul: output not dense")
        var bias_count = bias.dim_size(0)
        if bias_count != 0 and (bias_count != n_len or bias.strides()[0] != 1):
            raise Error("torch_max_backend_paired_matmul: a bias of N dense values")
        var ws = w.strides()
        # W's element (k, n) lies at k * w_k + n * w_n.
        var w_k = ws[1] if weight_nk else ws[0]
        var w_n = ws[0] if weight_nk else ws[1]
        _product(
            output.unsafe_ptr(),
            x.unsafe_ptr(),
            x_m,
            x_k,
            w.unsafe_ptr(),
            w_k,
            w_n,
            bias.unsafe_ptr(),
            bias_count != 0,
            m_len,
            n_len,
            k_len,
        )


def _pack_panel(
    panel: UnsafePointer[BFloat16, MutUntrackedOrigin],
    w: UnsafePointer[BFloat16, ImmutAnyOrigin],
    w_k: Int,
    w_n: Int,
    n0: Int,
    valid: Int,
    k_len: Int,
):
    """W's columns n0 .. n0 + valid as [k / 2][_COLS][2]: column j's values at
    k and k + 1 side by side, zeros past K and past the valid columns."""
    var pairs = ceildiv(k_len, 2)
    if w_n == 1 and valid == _COLS:
        # W [K, N] by rows: two rows' 16 columns interleaved a vector.
        for p in range(pairs):
            var k = 2 * p
            var row0 = w.unsafe_offset(k * w_k + n0)
            var row1 = w.unsafe_offset((k + 1) * w_k + n0)
            var dst = panel.unsafe_offset(p * 2 * _COLS)
            comptime for v in range(_VECTORS):
                var a = row0.unsafe_offset(v * _LANES).unsafe_load[width=_LANES]()
                var b = SIMD[DType.bfloat16, _LANES](0)
                if k + 1 < k_len:
                    b = row1.unsafe_offset(v * _LANES).unsafe_load[width=_LANES]()
                dst.unsafe_offset(v * 2 * _LANES).unsafe_store(a.interleave(b))
        return
    var panel32 = panel.bitcast[UInt32]()
    if w_k == 1 and k_len % 2 == 0:
        # W [N, K]: a column's pair is one 32-bit value of its stored row, so
        # the panel is W's rows of 32-bit values transposed, 16 x 16 blocks
        # turned in registers.
        var full = pairs - pairs % _LANES
        for g in range(_VECTORS):
            var j0 = g * _LANES
            if j0 + _LANES <= valid:
                var block = stack_allocation[_LANES * _LANES, DType.uint32]()
                for p0 in range(0, full, _LANES):
                    comptime for r in range(_LANES):
                        block.unsafe_offset(r * _LANES).unsafe_store(
                            w.unsafe_offset((n0 + j0 + r) * w_n).bitcast[UInt32]().unsafe_offset(p0).unsafe_load[width=_LANES]()
                        )
                    transpose16(block)
                    comptime for r in range(_LANES):
                        panel32.unsafe_offset((p0 + r) * _COLS + j0).unsafe_store(
                            block.unsafe_offset(r * _LANES).unsafe_load[width=_LANES]()
                        )
            for j in range(j0, j0 + _LANES):
                var src = w.unsafe_offset((n0 + j) * w_n).bitcast[UInt32]()
                var first = full if j0 + _LANES <= valid else 0
                for p in range(first, pairs):
                    panel32.unsafe_offset(p * _COLS + j).unsafe_store(
                        src.unsafe_offset(p).unsafe_load() if j < valid else UInt32(0)
                    )
        return
    for p in range(pairs):
        for j in range(_COLS):
            for t in range(2):
                var k = 2 * p + t
                var value = BFloat16(0)
                if j < valid and k < k_len:
                    value = w.unsafe_offset(k * w_k + (n0 + j) * w_n).unsafe_load()
                panel.unsafe_offset((p * _COLS + j) * 2 + t).unsafe_store(value)


def _product(
    result: UnsafePointer[BFloat16, MutAnyOrigin],
    x_given: UnsafePointer[BFloat16, ImmutAnyOrigin],
    x_m: Int,
    x_k: Int,
    w: UnsafePointer[BFloat16, ImmutAnyOrigin],
    w_k: Int,
    w_n: Int,
    bias: UnsafePointer[BFloat16, ImmutAnyOrigin],
    has_bias: Bool,
    m_len: Int,
    n_len: Int,
    k_len: Int,
) raises:
    var cores = num_physical_cores()
    var pairs = ceildiv(k_len, 2)
    # x as rows of pairs, [M][pairs] 32-bit values, the last pair of an odd K
    # padded with a zero: copied so unless x's rows are already dense along
    # an even K (any row stride).
    var x_row = x_m
    var x = x_given
    var dense = x_k == 1 and k_len % 2 == 0
    var copied = unsafe_alloc[BFloat16](1 if dense else max(1, m_len * pairs * 2))
    if not dense:
        x_row = pairs * 2
        pair_rows(copied, x_given, x_m, x_k, m_len, k_len, x_row)
        x = rebind[UnsafePointer[BFloat16, ImmutAnyOrigin]](copied)
    if m_len <= FEW_ROWS and w_k == 1 and k_len % 2 == 0:
        # A few rows times a Linear's weight: its rows are read where they
        # lie, once, with no panel to pack for so few output rows.
        few_rows(result, x, x_row, w, w_n, bias, has_bias, m_len, n_len, k_len)
        copied.unsafe_free()
        return
    var panels = ceildiv(n_len, _COLS)
    var blocks = ceildiv(m_len, _ROWS)
    # Work items: panels, each split into row parts when there are fewer
    # panels than cores (each part packs its panel itself).
    var parts = max(1, min(blocks, ceildiv(cores, panels)))
    var blocks_per_part = ceildiv(blocks, parts)
    var items = panels * parts
    var tasks = min(items, cores)
    var per_task = ceildiv(items, tasks)

    def run(task: Int) {var}:
        var panel = unsafe_alloc[BFloat16](max(1, pairs * 2 * _COLS))
        var packed_panel = -1
        for item in range(task * per_task, min(items, (task + 1) * per_task)):
            var p_index = item // parts
            var part = item % parts
            var n0 = p_index * _COLS
            var valid = min(_COLS, n_len - n0)
            if p_index != packed_panel:
                _pack_panel(panel, w, w_k, w_n, n0, valid, k_len)
                packed_panel = p_index
            var first_block = part * blocks_per_part
            var last_block = min(blocks, first_block + blocks_per_part)
            for block in range(first_block, last_block):
                _tile(result, x, x_row, panel, bias, has_bias, block * _ROWS, m_len, n_len, n0, valid, pairs)
        panel.unsafe_free()

    parallelize(run, tasks)
    copied.unsafe_free()


@always_inline
def _tile(
    result: UnsafePointer[BFloat16, MutAnyOrigin],
    x: UnsafePointer[BFloat16, ImmutAnyOrigin],
    x_row: Int,
    panel: UnsafePointer[BFloat16, MutUntrackedOrigin],
    bias: UnsafePointer[BFloat16, ImmutAnyOrigin],
    has_bias: Bool,
    m0: Int,
    m_len: Int,
    n_len: Int,
    n0: Int,
    valid: Int,
    pairs: Int,
):
    """Output rows m0 .. m0 + _ROWS (those within M) of the panel's columns."""
    var rows = stack_allocation[_ROWS, Int]()
    # Rows past the edge repeat the last row and are not stored.
    comptime for i in range(_ROWS):
        rows.unsafe_offset(i).unsafe_store(min(m0 + i, m_len - 1) * x_row)
    var acc = stack_allocation[_ROWS * _COLS, DType.float32]()
    comptime for t in range(_ROWS * _VECTORS):
        acc.unsafe_offset(t * _LANES).unsafe_store(F32x16(0))
    for p in range(pairs):
        var wk = stack_allocation[2 * _COLS, DType.bfloat16]()
        comptime for v in range(_VECTORS):
            wk.unsafe_offset(v * 2 * _LANES).unsafe_store(
                panel.unsafe_offset((p * _COLS + v * _LANES) * 2).unsafe_load[width=2 * _LANES]()
            )
        comptime for i in range(_ROWS):
            var pair = x.unsafe_offset(rows.unsafe_offset(i).unsafe_load() + 2 * p).bitcast[UInt32]().unsafe_load()
            var xv = bitcast[DType.bfloat16, 2 * _LANES](SIMD[DType.uint32, _LANES](pair))
            comptime for v in range(_VECTORS):
                var a = acc.unsafe_offset((i * _VECTORS + v) * _LANES)
                a.unsafe_store(
                    pair_dot(
                        a.unsafe_load[width=_LANES](),
                        xv,
                        wk.unsafe_offset(v * 2 * _LANES).unsafe_load[width=2 * _LANES](),
                    )
                )
    var count = min(_ROWS, m_len - m0)
    comptime for i in range(_ROWS):
        if i < count:
            var dst = result.unsafe_offset((m0 + i) * n_len + n0)
            comptime for v in range(_VECTORS):
                var sums = acc.unsafe_offset((i * _VECTORS + v) * _LANES).unsafe_load[width=_LANES]()
                var first = v * _LANES
                if first + _LANES <= valid:
                    if has_bias:
                        sums += bias.unsafe_offset(n0 + first).unsafe_load[width=_LANES]().cast[DType.float32]()
                    dst.unsafe_offset(first).unsafe_store(rounded[_LANES](sums))
                else:
                    for lane in range(_LANES):
                        if first + lane < valid:
                            var s = sums[lane]
                            if has_bias:
                                s += bias.unsafe_offset(n0 + first + lane).unsafe_load().cast[DType.float32]()
                            dst.unsafe_offset(first + lane).unsafe_store(rounded[1](SIMD[DType.float32, 1](s)))
