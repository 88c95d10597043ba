"""Order statistics: median, nanmedian and kthvalue, by a sort of the row.

Each sorts its row ascending (NaN last, as torch orders it) and picks one
position: k - 1 for kthvalue, the lower middle for median. torch's median
is NaN where its row holds a NaN, with the first NaN's index; nanmedian
leaves NaNs out, and is NaN for a row of NaNs only (index 0 here; torch's
is whatever its selection left there, 0, 0, 0, 2, 2, 3, 5 for rows of 1 to 7). The sort
keeps equal values in their order, so NaNs come in their positions' order
too, and ties give the first of them. (Which of several NaNs or ties
torch's selection returns is not fixed: for a row of NaNs only it is
rarely the first.)
"""

from __future__ import annotations

import math

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..kit import arg_tensor, is_static, node_arg, static_dim
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import normalize_dim
from .sorting import STABLE_FLOAT_ROW, STABLE_INT_ROW, _select

aten = torch.ops.aten


def _sorted_last(x: TensorValue, axis: int) -> tuple[TensorValue, TensorValue]:
    """``x`` with ``axis`` moved last (the others in order), sorted
    ascending along it: its values and their positions in ``x``. Stable
    where sort.stable can be (equal values and NaNs in order)."""
    others = [a for a in range(x.rank) if a != axis]
    moved = ops.permute(x, [*others, axis]) if axis != x.rank - 1 else x
    size = int(moved.shape[-1])
    if moved.dtype in (DType.float32, DType.bfloat16, DType.float16):
        stable = size <= STABLE_FLOAT_ROW
    else:
        stable = moved.dtype in (DType.int32, DType.int16, DType.int8, DType.uint8)
        stable = stable and size <= STABLE_INT_ROW
    return _select(moved, size, -1, largest=False, stable=stable)


def _pick(
    values: TensorValue, indices: TensorValue, position: TensorValue | int
) -> tuple[TensorValue, TensorValue]:
    """The value and index at ``position`` of each sorted row (a constant,
    or one per row)."""
    if isinstance(position, int):
        return values[..., position], indices[..., position]
    at = ops.unsqueeze(position, -1)
    batch = values.rank - 1
    return (
        ops.gather_nd(values, at, batch_dims=batch),
        ops.gather_nd(indices, at, batch_dims=batch),
    )


def _non_nan_count(values: TensorValue) -> TensorValue:
    """How many values of each row are not NaN, as int64."""
    present = ops.cast(ops.logical_not(ops.is_nan(values)), DType.int64)
    return ops.squeeze(ops.sum(present, -1), -1)


def _order_statistic(
    x: TensorValue, dim: int, keepdim: bool, which: str, k: int = 0
) -> tuple[TensorValue, TensorValue]:
    if x.rank == 0:
        return x, ops.constant(0, DType.int64, device=x.device)
    axis = normalize_dim(dim, x.rank)
    values, indices = _sorted_last(x, axis)
    size = int(values.shape[-1])
    if which == "kth":
        position: TensorValue | int = k - 1
    elif not x.dtype.is_float():
        position = (size - 1) // 2
    else:
        count = _non_nan_count(values)
        one = as_tensor(1, DType.int64)
        if which == "median":
            # A NaN in the row: the first NaN, which sorts right after the rest.
            middle = as_tensor((size - 1) // 2, DType.int64)
            position = ops.where(
                ops.equal(count, as_tensor(size, DType.int64)), middle, count
            )
        else:
            # The lower middle of the values that are not NaN; 0 for none.
            wide = ops.cast(ops.sub(count, one), DType.float64)
            half = ops.floor(ops.mul(wide, as_tensor(0.5, DType.float64)))
            position = ops.cast(
                ops.max(half, as_tensor(0.0, DType.float64)), DType.int64
            )
    value, index = _pick(values, indices, position)
    if keepdim:
        value, index = ops.unsqueeze(value, axis), ops.unsqueeze(index, axis)
    return value, index


def _static_whole(node: torch.fx.Node) -> str | None:
    """A tensor of static sizes (its values are sorted as one row)."""
    if not is_static(arg_tensor(node, 0).shape):
        return f"{node.target} of a tensor of symbolic size"
    return None


def _whole(self: TensorValue, which: str) -> TensorValue:
    flat = ops.reshape(self, [math.prod(int(d) for d in self.shape)])
    value, _ = _order_statistic(flat, 0, False, which)
    return value


@lowering(aten.median.default, supports=_static_whole)
def median(self: TensorValue) -> TensorValue:
    """median(Tensor self) -> Tensor"""
    return _whole(self, "median")


@lowering(aten.nanmedian.default, supports=_static_whole)
def nanmedian(self: TensorValue) -> TensorValue:
    """nanmedian(Tensor self) -> Tensor"""
    return _whole(self, "nanmedian")


_static_row = static_dim(1, -1)


@lowering(aten.median.dim, supports=_static_row)
def median_dim(
    self: TensorValue, dim: int, keepdim: bool = False
) -> tuple[TensorValue, TensorValue]:
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _order_statistic(self, dim, keepdim, "median")


@lowering(aten.nanmedian.dim, supports=_static_row)
def nanmedian_dim(
    self: TensorValue, dim: int, keepdim: bool = False
) -> tuple[TensorValue, TensorValue]:
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _order_statistic(self, dim, keepdim, "nanmedian")


def _static_kth(node: torch.fx.Node) -> str | None:
    """Along a dim of static size, for a k known at compile time."""
    if not isinstance(node_arg(node, 1, "k", 1), int):
        return "kthvalue with k known only at run time"
    return static_dim(2, -1)(node)


@lowering(aten.kthvalue.default, supports=_static_kth)
def kthvalue(
    self: TensorValue, k: int, dim: int = -1, keepdim: bool = False
) -> tuple[TensorValue, TensorValue]:
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _order_statistic(self, dim, keepdim, "kth", k)
