"""Where a float32 product takes one of our kernels or a form of its own,
and how each is built: one row as row sums, a few rows by the skinny or the
streamed kernel, the vendor BLAS, the register-tiled kernel; and the sizes
a product's forms are timed at (product_choice.py chooses among them).
lower/ops/linalg.py's mm and addmm list them as strategies."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from max.graph import TensorType, TensorValue, ops

from ..dtypes import dtype_name
from ..kernels import pair_dot, vendor_blas
from ..kernels.library import (
    PAIRED,
    SHIPPED,
    STREAMED,
    TILED,
    MojoLibrary,
    Parameter,
    custom,
)
from .context import current
from .kit import arg_tensor, fake_tensor, is_static, node_arg, same_sizes, size_hint
from .product_choice import ProductShape
from .shapes import static_size

aten = torch.ops.aten


def _left_index(node: torch.fx.Node) -> int:
    """Where mm's or addmm's left operand is among its arguments: mm's
    operands are its first two, addmm's follow the bias."""
    return 1 if node.target is aten.addmm.default else 0


def _operands(node: torch.fx.Node) -> tuple[torch.Tensor, object]:
    """mm's or addmm's left operand's meta and its right operand's node."""
    left = _left_index(node)
    return arg_tensor(node, left), node_arg(node, left + 1, "mat2", None)


def _swaps_two_dims(node: torch.fx.Node) -> bool:
    """Whether ``node`` is a transpose of a 2-d tensor's two dims."""
    if node.target is aten.t.default:
        return True
    if node.target is aten.transpose.int:
        return {d % 2 for d in node.args[1:3]} == {0, 1}
    return node.target is aten.permute.default and list(node.args[1]) == [1, 0]


def stored_rows(weight: object) -> torch.fx.Node | None:
    """The tensor a product's right operand ``weight`` reads transposed, where
    that is a 2-d tensor with contiguous rows: a weight stored [N, K], as
    nn.Linear keeps it; else None."""
    if not isinstance(weight, torch.fx.Node) or not _swaps_two_dims(weight):
        return None
    stored = weight.args[0]
    meta = stored.meta.get("val") if isinstance(stored, torch.fx.Node) else None
    if isinstance(meta, torch.Tensor) and meta.dim() == 2 and meta.is_contiguous():
        return stored
    return None


def _reads_stored_rows(weight: object) -> bool:
    """Whether a product's right operand reads a weight stored [N, K]."""
    return stored_rows(weight) is not None


def reads_stored_rows(node: torch.fx.Node) -> bool:
    """Whether mm or addmm ``node``'s right operand reads a weight stored
    [N, K] (a Linear's)."""
    return _reads_stored_rows(_operands(node)[1])


def one_row_times_stored_rows(node: torch.fx.Node) -> str | None:
    """One float32 row times a weight stored [N, K] and read transposed (a Linear in decode)."""
    row, weight = _operands(node)
    if (
        row.dtype != torch.float32
        or row.dim() != 2
        or not same_sizes(row.shape[:1], [1])
    ):
        return "not one float32 row"
    if not _reads_stored_rows(weight):
        return "a weight not stored [N, K] with contiguous rows"
    return None


# At most this many rows go to the skinny kernel: it streams the weight once
# for all rows, which holds while the rows' multiply-adds keep up with memory.
# A symbolic number of rows goes there when the graph was captured at this
# many or fewer (a decode step at a second batch size); a later call with
# more rows streams the weight once per 8, slower than MAX's matmul for
# hundreds of rows, which a graph captured at more rows keeps.
SKINNY_MAX_ROWS = 8
# Smaller weights stay in the CPU's cache: a product there is over within
# the kernel's fixed cost (about 15 us) in either other form. Above it, the
# kernel beats a summed product, whose transposed read of a Linear's weight
# is slow: 8 rows times a [256, 512] weight (a llama-style model's k_proj
# at batch 8) 26 us against 257 us, [128, 128] 21 us against 45 us (AMD EPYC
# Zen 4, 2026-11-28).
SKINNY_MIN_WEIGHT = 1 << 15


def _cpu_float32_static(
    rows: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype = torch.float32
) -> str | None:
    """What our CPU product kernels need: float32 operands (or ``dtype``) on
    the CPU, K and the weight static (the row count may be symbolic)."""
    if rows.dtype != dtype or weight.dtype != dtype:
        return "not float32" if dtype == torch.float32 else f"not {dtype}"
    if rows.device.type != "cpu":
        return "not on the CPU"
    if rows.dim() != 2 or not is_static(rows.shape[1:]) or not is_static(weight.shape):
        return "symbolic sizes"
    return None


def few_rows_times_large_weight(node: torch.fx.Node) -> str | None:
    """At most 8 float32 rows (or a symbolic number first seen at 8 or fewer) times a weight of 2^15 elements or more, either layout, static, on the CPU (decode steps; a Mojo kernel streams the weight once)."""
    rows, weight_node = _operands(node)
    weight = fake_tensor(weight_node)
    unfit = _cpu_float32_static(rows, weight)
    if unfit is not None:
        return unfit
    # A symbolic count by the value it was captured with.
    count = size_hint(rows.shape[0])
    if count is None or not 0 < count <= SKINNY_MAX_ROWS:
        return f"no rows, or more than {SKINNY_MAX_ROWS}"
    if weight.numel() < SKINNY_MIN_WEIGHT:
        return "a weight small enough for the cache"
    return None


def streamed_fits(node: torch.fx.Node) -> str | None:
    """What the skinny kernel takes, but for one row times a weight stored [N, K] (our kernel that prefetches the weight; one row of a Linear runs as row sums, skinny or MKL)."""
    unfit = few_rows_times_large_weight(node)
    if unfit is not None:
        return unfit
    rows, weight = _operands(node)
    # Timed alone it beat those by 5-15 % at a llama-style model's one-row
    # shapes, but that model's decode step took 10.0-10.4 ms in its graphs
    # with them and 11.7-11.9 with it (Intel Xeon, 2026-12-01).
    if size_hint(rows.shape[0]) == 1 and _reads_stored_rows(weight):
        return "one row times a weight stored [N, K]"
    return None


def _stored_weight(mat2: TensorValue) -> tuple[TensorValue, bool]:
    """The weight as it is stored, and whether that is [N, K] (a Linear's,
    which the graph reads transposed): MAX folds the transpose taken here
    into the graph's, so a kernel reads the weight's own memory."""
    _, weight = _operands(current().node)
    stored_nk = _reads_stored_rows(weight)
    return (ops.transpose(mat2, 0, 1) if stored_nk else mat2), stored_nk


def _kernel_product(
    library: MojoLibrary,
    kernel: str,
    rows: TensorValue,
    mat2: TensorValue,
    /,
    *,
    rows_as_stored: bool = False,
    more: Sequence[TensorValue] = (),
    **parameters: Parameter,
) -> TensorValue:
    """``rows @ mat2`` by one of our product kernels, which reads the weight
    where it is stored and is told its layout (``weight_nk``), and ``more``
    operands after the weight. With ``rows_as_stored`` (a kernel that reads
    rows either way) rows that are a stored matrix read transposed (a weight
    gradient's dY^T) go to it as stored, and it is told so (``x_km``): MAX
    would otherwise copy them transposed for the call, a pass at its
    transpose's few GB/s."""
    stored, stored_nk = _stored_weight(mat2)
    given = rows
    if rows_as_stored:
        node = current().node
        x_km = _reads_stored_rows(node.args[_left_index(node)])
        given = ops.transpose(rows, 0, 1) if x_km else rows
        parameters = {**parameters, "x_km": x_km}
    (product,) = custom(
        library,
        kernel,
        [given, stored, *more],
        [TensorType(rows.dtype, [rows.shape[0], mat2.shape[1]], rows.device)],
        rows.device,
        parameters={**parameters, "weight_nk": stored_nk},
    )
    return product


def _few_rows_by(
    library: MojoLibrary, kernel: str
) -> Callable[[TensorValue, TensorValue], TensorValue]:
    """A product of a few rows by one of our few-rows kernels, told the rows'
    count, or 0: counted at run time, 8 at a time, so that a later call with
    more rows than the capture saw is still right."""

    def few_rows(rows: TensorValue, mat2: TensorValue) -> TensorValue:
        count = static_size(rows.shape[0]) or 0
        return _kernel_product(library, kernel, rows, mat2, rows=count)

    return few_rows


# MAX's matmul streams a large weight at about half the memory's speed for
# one to eight rows, and a few shapes of a weight stored [K, N] at a tenth
# (benchmarks.gemm --rows 1 and 8); this kernel reads each stored weight
# row once, front to back.
few_rows_times_weight = _few_rows_by(SHIPPED, "torch_max_backend_skinny_matmul")
# At 8 rows MAX's matmul, MKL and the skinny kernel read a weight from memory
# at 6-11 GB/s, this kernel, which prefetches what it reads next, at 10-17
# (docs/benchmarks.md, "Products that stream their weights").
few_rows_streamed = _few_rows_by(STREAMED, "torch_max_backend_streamed_matmul")


def vendor_fits(node: torch.fx.Node) -> str | None:
    """float32 rows times a 2-d weight with static sizes on the CPU, where a vendor BLAS (MKL) was found (kernels/vendor_blas.py), or bfloat16 or float16 ones where it multiplies them; chosen by measurement or by product_strategy, never by rule."""
    rows, weight_node = _operands(node)
    found = vendor_blas.vendor_blas()
    half = found is not None and dtype_name(rows.dtype) in found.half_types
    dtype = rows.dtype if half else torch.float32
    unfit = _cpu_float32_static(rows, fake_tensor(weight_node), dtype)
    if unfit is not None:
        return unfit
    if found is None:
        return "no vendor BLAS on this machine"
    return None


def tiled_fits(node: torch.fx.Node) -> str | None:
    """float32 rows (any count) times a 2-d weight with static sizes on the CPU (our register-tiled Mojo kernel, quick to compile); chosen only by product_strategy='tiled', never by rule or timing."""
    rows, weight_node = _operands(node)
    return _cpu_float32_static(rows, fake_tensor(weight_node))


def tiled_product(rows: TensorValue, mat2: TensorValue) -> TensorValue:
    # Compiles in seconds where a graph's first MAX matmul costs about 50 s
    # (kernels/mojo_tiled/tiled_matmul.mojo).
    return _kernel_product(
        TILED, "torch_max_backend_tiled_matmul", rows, mat2, rows_as_stored=True
    )


def product_shape(node: torch.fx.Node) -> ProductShape | None:
    """The sizes a product's strategies are timed at (a symbolic row count
    by the value it was captured with)."""
    rows, weight_node = _operands(node)
    weight = fake_tensor(weight_node)
    count = size_hint(rows.shape[0])
    if count is None or rows.dim() != 2 or not is_static(weight.shape):
        return None
    k, n = (int(d) for d in weight.shape)
    return ProductShape(count, k, n, _reads_stored_rows(weight_node), dtype=rows.dtype)


def vendor_product(
    rows: TensorValue, mat2: TensorValue, bias: TensorValue | None = None
) -> TensorValue:
    """``rows @ mat2 (+ bias)`` by the vendor BLAS; the bias (N values of the
    rows' type) joins the float32 sums before their one rounding, as
    PyTorch's addmm adds it."""
    found = vendor_blas.vendor_blas()
    assert found is not None  # vendor_fits checked
    if bias is None:
        bias = vendor_blas.no_bias(rows.dtype, rows.device)
    return _kernel_product(
        vendor_blas.VENDOR_KERNELS,
        "torch_max_backend_vendor_matmul",
        rows,
        mat2,
        more=[bias],
        library=found.path,
    )


def paired_fits(node: torch.fx.Node) -> str | None:
    """bfloat16 rows times a 2-d bfloat16 weight with static sizes on a CPU with bfloat16 pair dot products (AVX512-BF16; our paired Mojo kernel); chosen by measurement or by product_strategy, never by rule."""
    rows, weight_node = _operands(node)
    unfit = _cpu_float32_static(rows, fake_tensor(weight_node), torch.bfloat16)
    if unfit is not None:
        return unfit
    if not pair_dot.has_pair_dot():
        return "no bfloat16 pair dot product (AVX512-BF16) on this CPU"
    return None


def paired_product(
    rows: TensorValue, mat2: TensorValue, bias: TensorValue | None = None
) -> TensorValue:
    """``rows @ mat2 (+ bias)`` of bfloat16 operands on the CPU's bfloat16
    pair dot products (kernels/mojo_paired), summed in float32 with the bias
    (N values) and rounded once, as PyTorch's addmm does. Rows that are a
    stored matrix read transposed (a weight gradient's dY^T) go to it as
    stored, and it turns them into rows of pairs itself, in registers."""
    if bias is None:
        bias = vendor_blas.no_bias(rows.dtype, rows.device)
    return _kernel_product(
        PAIRED, pair_dot.KERNEL, rows, mat2, rows_as_stored=True, more=[bias]
    )


def row_times_stored_rows(row: TensorValue, mat2: TensorValue) -> TensorValue:
    # MAX's matmul streams a [N, K] weight at about 30 GB/s for one row on
    # this class of CPU; a product and a sum along each stored row read it at
    # the memory's speed (72 of 78 GB/s, benchmarks.gemm --rows 1). MAX folds
    # the transpose back, so each row is read where it lies.
    rows = ops.transpose(mat2, 0, 1)
    return ops.reshape(ops.sum(ops.mul(rows, row), -1), [1, rows.shape[0]])
