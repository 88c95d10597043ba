"""Arg reductions: argmax, argmin, and max/min along a dim with their indices."""

from __future__ import annotations

import torch
from max.dtype import DType
from max.graph import Dim, TensorValue, ops
from max.graph.ops.reduction import max as reduce_max

from ..reduced_axes import Reducer, reduce_axes
from ..registry import lowering
from ..scalars import as_tensor
from .reduction import torch_max, torch_min

aten = torch.ops.aten


def _zero_index(shape: list[Dim | int], x: TensorValue) -> TensorValue:
    """Index 0 everywhere: the arg reduction of a single element.

    Built instead of the reduction, which MAX fails to compile over an axis
    of size 1.
    """
    zero = ops.constant(0, DType.int64, device=x.device)
    return ops.broadcast_to(zero, shape) if shape else zero


def _nan_first(fn: Reducer) -> Reducer:
    """``fn``'s index, or the first NaN's where one is held, as torch's."""

    def index(x: TensorValue, axis: int) -> TensorValue:
        found = fn(x, axis)
        if not x.dtype.is_float():
            return found
        nan = ops.cast(ops.is_nan(x), DType.int32)
        held = ops.greater(reduce_max(nan, axis), as_tensor(0, DType.int32))
        return ops.where(held, ops.argmax(nan, axis), found)

    return index


def _argreduce_axes(
    x: TensorValue, dim: int | None, keepdim: bool, fn: Reducer
) -> TensorValue:
    """Index of the first extreme along ``dim`` (over the flattened tensor if None)."""
    if x.dtype == DType.bool:  # max.dim's indices, as in _extreme
        x = ops.cast(x, DType.uint8)
    fn = _nan_first(fn)
    if dim is None:
        if all(d == 1 for d in x.shape):  # also rank 0
            return _zero_index([1] * x.rank if keepdim else [], x)
        flat = fn(ops.reshape(x, [-1]), 0).reshape([])
        return ops.reshape(flat, [1] * x.rank) if keepdim else flat
    if x.rank == 0:
        return _zero_index([], x)
    if x.shape[dim] == 1:
        shape = list(x.shape)
        if not keepdim:
            del shape[dim]
        return _zero_index(shape, x)
    return reduce_axes(x, dim, keepdim, fn)


@lowering(aten.argmax.default)
def argmax(
    self: TensorValue, dim: int | None = None, keepdim: bool = False
) -> TensorValue:
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _argreduce_axes(self, dim, keepdim, ops.argmax)


@lowering(aten.argmin.default)
def argmin(
    self: TensorValue, dim: int | None = None, keepdim: bool = False
) -> TensorValue:
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _argreduce_axes(self, dim, keepdim, ops.argmin)


@lowering(aten.max.dim)
def max_dim(
    self: TensorValue, dim: int, keepdim: bool = False
) -> tuple[TensorValue, TensorValue]:
    """max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return (
        reduce_axes(self, dim, keepdim, torch_max),
        _argreduce_axes(self, dim, keepdim, ops.argmax),
    )


@lowering(aten.min.dim)
def min_dim(
    self: TensorValue, dim: int, keepdim: bool = False
) -> tuple[TensorValue, TensorValue]:
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return (
        reduce_axes(self, dim, keepdim, torch_min),
        _argreduce_axes(self, dim, keepdim, ops.argmin),
    )
