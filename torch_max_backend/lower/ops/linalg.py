"""Matrix products (mm, bmm, addmm, nn.Bilinear's _trilinear) and pairwise distances (cdist and its gradient, pdist)."""

from __future__ import annotations

import math
import string
from collections.abc import Callable

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..context import current
from ..kit import arg_tensor, device_of
from ..opmath import accumulated
from ..packed_products import packed_fits, packed_product
from ..product_choice import PACKED, choose_by_measurement
from ..product_kernels import (
    few_rows_streamed,
    few_rows_times_large_weight,
    few_rows_times_weight,
    one_row_times_stored_rows,
    paired_fits,
    paired_product,
    product_shape,
    reads_stored_rows,
    row_times_stored_rows,
    streamed_fits,
    tiled_fits,
    tiled_product,
    vendor_fits,
    vendor_product,
)
from ..products import product
from ..registry import Strategy, decomposition, lowering, lowering_strategies
from ..row_products import KERNELS, MAX_ROWS, ROW_PRODUCTS, row_products
from ..scalars import Operand, ScalarArg, as_tensor
from ..shapes import static_size
from .reduction import torch_max

aten = torch.ops.aten


def _times(x: TensorValue, factor: Operand) -> TensorValue:
    if not isinstance(factor, ScalarArg) and factor == 1:
        return x
    return ops.mul(x, as_tensor(factor, x.dtype))


def _scaled_sum(
    self: TensorValue, product: TensorValue, beta: Operand, alpha: Operand
) -> TensorValue:
    """addmm's ``beta * self + alpha * product``, however the product was built."""
    scaled = _times(product, alpha)  # built first: the graph text stays as it was
    return ops.add(_times(self, beta), scaled)


def _mm_by_row_sums(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return row_times_stored_rows(self, mat2)


def _mm_by_skinny_kernel(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return few_rows_times_weight(self, mat2)


def _mm_by_streamed_kernel(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return few_rows_streamed(self, mat2)


def _mm(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return product(self, mat2, stored_rows=reads_stored_rows(current().node))


def _mm_by_vendor(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return vendor_product(self, mat2)


def _mm_by_packed_weight(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return packed_product(self, mat2)


def _mm_by_pair_dots(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return paired_product(self, mat2)


def _mm_by_tiled_kernel(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return tiled_product(self, mat2)


# Which fitting strategy builds a product: measured per machine and shape.
_choose = choose_by_measurement(product_shape)


mm = lowering_strategies(
    aten.mm.default,
    candidates=[
        Strategy("row_sums", _mm_by_row_sums, one_row_times_stored_rows),
        Strategy("skinny", _mm_by_skinny_kernel, few_rows_times_large_weight),
        Strategy("streamed", _mm_by_streamed_kernel, streamed_fits),
        Strategy("matmul", _mm),
        Strategy("vendor", _mm_by_vendor, vendor_fits),
        Strategy(PACKED, _mm_by_packed_weight, packed_fits),
        Strategy("tiled", _mm_by_tiled_kernel, tiled_fits),
        Strategy("paired", _mm_by_pair_dots, paired_fits),
    ],
    choose=_choose,
)


def _row_products_fit(node: torch.fx.Node) -> str | None:
    """At most 8 float32 rows on the CPU times two or three 2-d float32 weights of their width, static sizes (our grouped kernel; passes/sibling_products.py makes such nodes)."""
    x, weights = node.args[0].meta["val"], [w.meta["val"] for w in node.args[1]]
    if len(weights) not in KERNELS:
        return f"{len(weights)} weights, not 2 or 3"
    if any(device_of(t).type != "cpu" for t in (x, *weights)):
        return "not on the CPU"
    if x.dtype != torch.float32 or any(w.dtype != torch.float32 for w in weights):
        return "not float32"
    sizes = [*x.shape, *(d for w in weights for d in w.shape)]
    if not all(isinstance(d, int) for d in sizes):
        return "symbolic sizes"
    if x.dim() != 2 or not 0 < x.shape[0] <= MAX_ROWS:
        return f"not 1 to {MAX_ROWS} rows"
    if any(w.dim() != 2 or w.shape[1] != x.shape[1] for w in weights):
        return "weights not [N, K] of the rows' K"
    return None


@lowering(ROW_PRODUCTS, supports=_row_products_fit)
def grouped_row_products(
    x: TensorValue, weights: list[TensorValue]
) -> list[TensorValue]:
    """torch_max_backend::row_products(Tensor x, Tensor[] weights) -> Tensor[]"""
    return row_products(x, weights)


@lowering(aten.bmm.default)
def bmm(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """bmm(Tensor self, Tensor mat2) -> Tensor"""
    return accumulated(product, self, mat2)


def _addmm_by(
    product: Callable[..., TensorValue], adds_bias: bool = False
) -> Callable[..., TensorValue]:
    """addmm's lowering around one way of building the product. Where the
    product's kernel adds a bias itself (``adds_bias``: the vendor BLAS's), a
    Linear's bias, N values of the product's type with beta and alpha 1,
    joins its float32 sums before their one rounding, as PyTorch's addmm adds
    it; any other ``self`` is added after."""

    def addmm_lowering(
        self: TensorValue,
        mat1: TensorValue,
        mat2: TensorValue,
        *,
        beta: Operand = 1,
        alpha: Operand = 1,
    ) -> TensorValue:
        """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
        if adds_bias and _a_linear_bias(self, mat1, mat2, beta, alpha):
            return product(mat1, mat2, self)
        return _scaled_sum(self, product(mat1, mat2), beta, alpha)

    return addmm_lowering


def _a_linear_bias(
    self: TensorValue,
    mat1: TensorValue,
    mat2: TensorValue,
    beta: Operand,
    alpha: Operand,
) -> bool:
    n = static_size(self.shape[0]) if self.rank == 1 else None
    return (
        _is_one(beta)
        and _is_one(alpha)
        and self.dtype == mat1.dtype
        and n is not None
        and n == static_size(mat2.shape[1])
    )


def _is_one(value: Operand) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == 1


addmm = lowering_strategies(
    aten.addmm.default,
    candidates=[
        Strategy(
            "row_sums", _addmm_by(row_times_stored_rows), one_row_times_stored_rows
        ),
        Strategy(
            "skinny", _addmm_by(few_rows_times_weight), few_rows_times_large_weight
        ),
        Strategy("streamed", _addmm_by(few_rows_streamed), streamed_fits),
        Strategy("matmul", _addmm_by(_mm)),
        Strategy("vendor", _addmm_by(vendor_product, adds_bias=True), vendor_fits),
        Strategy(PACKED, _addmm_by(packed_product, adds_bias=True), packed_fits),
        Strategy("tiled", _addmm_by(tiled_product), tiled_fits),
        Strategy("paired", _addmm_by(paired_product, adds_bias=True), paired_fits),
    ],
    choose=_choose,
)


def _p_norm(diff: TensorValue, p: float, axis: int) -> TensorValue:
    """The p-norm of ``diff`` along ``axis`` (p may be 0 or inf, as in torch)."""
    a = ops.abs(diff)
    if p == 0:
        nonzero = ops.cast(as_tensor(a, DType.bool), a.dtype)  # NaN counts
        return ops.squeeze(ops.sum(nonzero, axis=axis), axis)
    if p == math.inf:
        return ops.squeeze(torch_max(a, axis), axis)
    if p == 1:
        return ops.squeeze(ops.sum(a, axis=axis), axis)
    if p == 2:
        return ops.sqrt(ops.squeeze(ops.sum(ops.mul(a, a), axis=axis), axis))
    total = ops.squeeze(ops.sum(ops.pow(a, as_tensor(p, a.dtype)), axis=axis), axis)
    return ops.pow(total, as_tensor(1 / p, a.dtype))


@lowering(aten._cdist_forward.default)
def cdist(
    x1: TensorValue, x2: TensorValue, p: float, compute_mode: int | None
) -> TensorValue:
    """_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor"""
    # The direct form, exact for every p; torch's matmul shortcut for p=2
    # trades accuracy for speed on large inputs.
    diff = ops.sub(ops.unsqueeze(x1, -2), ops.unsqueeze(x2, -3))
    return _p_norm(diff, p, -1)


def _static_rows(node: torch.fx.Node) -> str | None:
    """A row count known at compile time."""
    n = arg_tensor(node, 0).shape[0]
    return None if isinstance(n, int) else "_pdist_forward of a symbolic row count"


@lowering(aten._pdist_forward.default, supports=_static_rows)
def pdist(self: TensorValue, p: float = 2.0) -> TensorValue:
    """_pdist_forward(Tensor self, float p=2.) -> Tensor"""
    n = int(self.shape[0])
    # Rows i < j in row-major order, as torch lists them.
    i, j = np.triu_indices(n, k=1)
    left = ops.gather(
        self, ops.constant(i.astype(np.int64), DType.int64, self.device), 0
    )
    right = ops.gather(
        self, ops.constant(j.astype(np.int64), DType.int64, self.device), 0
    )
    return _p_norm(ops.sub(left, right), p, -1)


@lowering(aten._cdist_backward.default)
def cdist_backward(
    grad: TensorValue, x1: TensorValue, x2: TensorValue, p: float, cdist: TensorValue
) -> TensorValue:
    """_cdist_backward(Tensor grad, Tensor x1, Tensor x2, float p, Tensor cdist) -> Tensor"""
    # x1's gradient, summed over x2's rows pair by pair as torch sums it:
    # the gradient of |diff|_p is sign(diff) |diff|^(p-1) / dist^(p-1), and
    # 0 where the distance is 0.
    diff = ops.sub(ops.unsqueeze(x1, -2), ops.unsqueeze(x2, -3))
    g, dist = ops.unsqueeze(grad, -1), ops.unsqueeze(cdist, -1)
    zero = as_tensor(0.0, diff.dtype)
    if p == 0:
        return ops.broadcast_to(zero, x1.shape)
    sign = ops.sub(
        ops.cast(ops.greater(diff, zero), diff.dtype),
        ops.cast(ops.greater(zero, diff), diff.dtype),
    )
    if p == 1:
        pair = ops.mul(g, sign)
    elif p == math.inf:
        # Only the coordinates where |diff| is the distance carry it.
        at_max = ops.cast(ops.equal(ops.abs(diff), dist), diff.dtype)
        pair = ops.mul(ops.mul(g, sign), at_max)
    else:
        if p == 2:
            scaled = diff
        else:
            power = as_tensor(p - 1, diff.dtype)
            # 0 where diff is 0, which a power below 0 (p < 1) makes inf.
            scaled = ops.where(
                ops.equal(diff, zero),
                zero,
                ops.mul(sign, ops.pow(ops.abs(diff), power)),
            )
            dist = ops.pow(dist, power)
        pair = ops.where(ops.equal(dist, zero), zero, ops.div(ops.mul(g, scaled), dist))
    return ops.squeeze(ops.sum(pair, axis=-2), -2)


@decomposition(aten._trilinear.default)
def trilinear(
    i1: torch.Tensor,
    i2: torch.Tensor,
    i3: torch.Tensor,
    expand1: list[int],
    expand2: list[int],
    expand3: list[int],
    sumdim: list[int],
    unroll_dim: int = 1,
) -> torch.Tensor:
    """nn.Bilinear's product (``_trilinear``) as an einsum, which traces to
    the products and permutes we lower; the product of all three, summed
    over ``sumdim``, without the [batch, out, in1, in2] intermediate a
    broadcast product would make."""
    total = i1.dim() + len(expand1)
    letters = string.ascii_letters[:total]
    if set(expand1) & set(expand2) & set(expand3):
        # A dim all three lack: torch makes it empty, an einsum cannot name
        # it. Not from nn.Bilinear; left to torch.
        return NotImplemented

    def subscripts(expand: list[int]) -> str:
        skip = set(expand)
        return "".join(letters[d] for d in range(total) if d not in skip)

    summed = set(sumdim)
    out = "".join(letters[d] for d in range(total) if d not in summed)
    equation = (
        f"{subscripts(expand1)},{subscripts(expand2)},{subscripts(expand3)}->{out}"
    )
    return torch.einsum(equation, i1, i2, i3)
