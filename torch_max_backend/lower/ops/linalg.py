"""Matrix products (mm, bmm, addmm) and pairwise distances (cdist, pdist)."""

from __future__ import annotations

import math

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..kit import arg_tensor
from ..registry import lowering
from ..scalars import Operand, ScalarArg, as_tensor

aten = torch.ops.aten


def _times(x: TensorValue, factor: Operand) -> TensorValue:
    if not isinstance(factor, ScalarArg) and factor == 1:
        return x
    return ops.mul(x, as_tensor(factor, x.dtype))


@lowering(aten.mm.default)
def mm(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return ops.matmul(self, mat2)


@lowering(aten.bmm.default)
def bmm(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """bmm(Tensor self, Tensor mat2) -> Tensor"""
    return ops.matmul(self, mat2)


@lowering(aten.addmm.default)
def addmm(
    self: TensorValue,
    mat1: TensorValue,
    mat2: TensorValue,
    *,
    beta: Operand = 1,
    alpha: Operand = 1,
) -> TensorValue:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product = _times(ops.matmul(mat1, mat2), alpha)
    return ops.add(_times(self, beta), product)


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
