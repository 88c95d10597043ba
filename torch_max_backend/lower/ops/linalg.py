"""Matrix products (mm, bmm, addmm) and pairwise distances (cdist, pdist)."""

from __future__ import annotations

import math

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..kit import arg_tensor, node_arg, same_sizes
from ..registry import Strategy, lowering, lowering_strategies
from ..scalars import Operand, ScalarArg, as_tensor

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


_TRANSPOSES = {aten.t.default, aten.transpose.int, aten.permute.default}


def one_row_times_stored_rows(node: torch.fx.Node) -> str | None:
    """One float32 row times a weight stored [N, K] and read transposed (a Linear in decode)."""
    # mm's operands are its first two arguments; addmm's follow the bias.
    offset = 1 if node.target is aten.addmm.default else 0
    row, weight = arg_tensor(node, offset), node_arg(node, offset + 1, "mat2", None)
    if (
        row.dtype != torch.float32
        or row.dim() != 2
        or not same_sizes(row.shape[:1], [1])
    ):
        return "not one float32 row"
    if not isinstance(weight, torch.fx.Node) or weight.target not in _TRANSPOSES:
        return "a weight not read transposed"
    stored = weight.args[0]
    meta = stored.meta.get("val") if isinstance(stored, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor) or meta.dim() != 2:
        return "a weight not read transposed"
    if not meta.is_contiguous():
        return "a weight whose rows are not contiguous"
    return None


def _row_times_stored_rows(row: TensorValue, mat2: TensorValue) -> TensorValue:
    # MAX's matmul streams a [N, K] weight at about 30 GB/s for one row on
    # this class of CPU; a product and a sum along each stored row read it at
    # the memory's speed (72 of 78 GB/s, benchmarks.gemm --rows 1). MAX folds
    # the transpose back, so each row is read where it lies.
    rows = ops.transpose(mat2, 0, 1)
    return ops.reshape(ops.sum(ops.mul(rows, row), -1), [1, rows.shape[0]])


def _mm_by_row_sums(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return _row_times_stored_rows(self, mat2)


def _mm(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return ops.matmul(self, mat2)


mm = lowering_strategies(
    aten.mm.default,
    candidates=[
        Strategy("row_sums", _mm_by_row_sums, one_row_times_stored_rows),
        Strategy("matmul", _mm),
    ],
)


@lowering(aten.bmm.default)
def bmm(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """bmm(Tensor self, Tensor mat2) -> Tensor"""
    return ops.matmul(self, mat2)


def _addmm(
    self: TensorValue,
    mat1: TensorValue,
    mat2: TensorValue,
    *,
    beta: Operand = 1,
    alpha: Operand = 1,
) -> TensorValue:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return _scaled_sum(self, ops.matmul(mat1, mat2), beta, alpha)


def _addmm_by_row_sums(
    self: TensorValue,
    mat1: TensorValue,
    mat2: TensorValue,
    *,
    beta: Operand = 1,
    alpha: Operand = 1,
) -> TensorValue:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    return _scaled_sum(self, _row_times_stored_rows(mat1, mat2), beta, alpha)


addmm = lowering_strategies(
    aten.addmm.default,
    candidates=[
        Strategy("row_sums", _addmm_by_row_sums, one_row_times_stored_rows),
        Strategy("matmul", _addmm),
    ],
)


def _p_norm(diff: TensorValue, p: float, axis: int) -> TensorValue:
    """The p-norm of ``diff`` along ``axis`` (p may be 0 or inf, as in torch)."""
    a = ops.abs(diff)
    if p == 0:
        nonzero = ops.cast(ops.not_equal(a, as_tensor(0, a.dtype)), a.dtype)
        return ops.squeeze(ops.sum(nonzero, axis=axis), axis)
    if p == math.inf:
        return ops.squeeze(ops.max(a, axis=axis), axis)
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
