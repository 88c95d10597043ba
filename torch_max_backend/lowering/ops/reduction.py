"""Reductions: sum, mean, amax, amin, var, any, ..."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from max.dtype import DType
from max.graph import TensorValue, ops
from max.graph.ops.reduction import max as reduce_max
from max.graph.ops.reduction import min as reduce_min

from ..registry import lowering
from ..scalars import Operand, ScalarArg, as_tensor, out_max_dtype
from ..shapes import normalize_dim, normalize_dims, numel

aten = torch.ops.aten

Reducer = Callable[[TensorValue, int], TensorValue]


def _reduce(
    x: TensorValue, dims: Sequence[int] | int | None, keepdim: bool, fn: Reducer
) -> TensorValue:
    """``fn`` over each of ``dims`` (MAX reduces one axis, keeping it)."""
    if x.rank == 0:
        return fn(ops.reshape(x, [1]), 0).reshape([])
    axes = normalize_dims(dims, x.rank)
    for axis in axes:
        x = fn(x, axis)
    if not keepdim:
        for axis in reversed(axes):
            x = ops.squeeze(x, axis)
    return x


@lowering(aten.sum.dim_IntList)
def sum_dim(
    self: TensorValue,
    dim: Sequence[int] | None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> TensorValue:
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _reduce(as_tensor(self, out_max_dtype()), dim, keepdim, ops.sum)


@lowering(aten.sum.default)
def sum_all(self: TensorValue, *, dtype: torch.dtype | None = None) -> TensorValue:
    """sum(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return _reduce(as_tensor(self, out_max_dtype()), None, False, ops.sum)


@lowering(aten.mean.dim)
def mean_dim(
    self: TensorValue,
    dim: Sequence[int] | None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> TensorValue:
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _reduce(as_tensor(self, out_max_dtype()), dim, keepdim, ops.mean)


@lowering(aten.mean.default)
def mean_all(self: TensorValue, *, dtype: torch.dtype | None = None) -> TensorValue:
    """mean(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return _reduce(as_tensor(self, out_max_dtype()), None, False, ops.mean)


@lowering(aten.amax.default)
def amax(
    self: TensorValue, dim: Sequence[int] = (), keepdim: bool = False
) -> TensorValue:
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _reduce(self, dim, keepdim, reduce_max)


@lowering(aten.amin.default)
def amin(
    self: TensorValue, dim: Sequence[int] = (), keepdim: bool = False
) -> TensorValue:
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return _reduce(self, dim, keepdim, reduce_min)


def _any(
    x: TensorValue, dims: Sequence[int] | int | None, keepdim: bool
) -> TensorValue:
    as_int = ops.cast(ops.not_equal(x, as_tensor(0, x.dtype)), DType.int32)
    return ops.greater(
        _reduce(as_int, dims, keepdim, reduce_max), as_tensor(0, DType.int32)
    )


@lowering(aten.any.dim, aten.any.dims)
def any_dim(
    self: TensorValue, dim: int | Sequence[int] | None = None, keepdim: bool = False
) -> TensorValue:
    """any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor
    any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor
    """
    return _any(self, dim, keepdim)


@lowering(aten.any.default)
def any_all(self: TensorValue) -> TensorValue:
    """any(Tensor self) -> Tensor"""
    return _any(self, None, False)


@lowering(aten.var.correction)
def var(
    self: TensorValue,
    dim: Sequence[int] | None = None,
    *,
    correction: Operand | None = None,
    keepdim: bool = False,
) -> TensorValue:
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    x = as_tensor(self, out_max_dtype())
    axes = normalize_dims(dim, x.rank)
    mean = _reduce(x, axes, True, ops.mean)
    centered = ops.sub(x, mean)
    total = _reduce(ops.mul(centered, centered), axes, keepdim, ops.sum)
    count = ops.cast(ops.shape_to_tensor([numel(x, axes)]).reshape([]), x.dtype)
    if correction is None:
        correction = 1
    if isinstance(correction, ScalarArg) or correction != 0:
        count = ops.sub(count, as_tensor(correction, x.dtype))
    return ops.div(total, count)


@lowering(aten.cumsum.default)
def cumsum(
    self: TensorValue, dim: int, *, dtype: torch.dtype | None = None
) -> TensorValue:
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    x = as_tensor(self, out_max_dtype())
    if x.rank == 0:
        return x
    return ops.cumsum(x, axis=normalize_dim(dim, x.rank))


@lowering(aten.var_mean.correction)
def var_mean(
    self: TensorValue,
    dim: Sequence[int] | None = None,
    *,
    correction: Operand | None = None,
    keepdim: bool = False,
) -> tuple[TensorValue, TensorValue]:
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)"""
    x = as_tensor(self, out_max_dtype())
    mean = _reduce(x, dim, keepdim, ops.mean)
    return var(x, dim, correction=correction, keepdim=keepdim), mean
