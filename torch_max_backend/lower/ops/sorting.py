"""Sorting and selection: sort, topk.

MAX's top_k/bottom_k select along any axis on CPU (the last axis on GPU);
a full sort is a top_k of the whole axis.
"""

from __future__ import annotations

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..kit import arg_tensor, node_arg
from ..registry import lowering
from ..shapes import normalize_dim, static_size

aten = torch.ops.aten


def _select(
    x: TensorValue, k: int, dim: int, largest: bool
) -> tuple[TensorValue, TensorValue]:
    if x.rank == 0:
        return x, ops.constant(0, DType.int64, device=x.device)
    axis = normalize_dim(dim, x.rank)
    last = x.rank - 1
    moved = x if axis == last else ops.transpose(x, axis, last)
    values, indices = (ops.top_k if largest else ops.bottom_k)(moved, k, axis=-1)
    if axis != last:
        values = ops.transpose(values, axis, last)
        indices = ops.transpose(indices, axis, last)
    return values, indices


def _static_axis(node: torch.fx.Node) -> str | None:
    """The sorted dim has a size known at compile time."""
    meta = arg_tensor(node, 0)
    if meta.dim() == 0:
        return None
    dim = node_arg(node, 1, "dim", -1)
    if node.target is aten.topk.default:
        dim = node_arg(node, 2, "dim", -1)
    if not isinstance(meta.shape[normalize_dim(dim, meta.dim())], int):
        return f"{node.target} along a symbolic dim"
    return None


@lowering(aten.sort.default, supports=_static_axis)
def sort(
    self: TensorValue, dim: int = -1, descending: bool = False
) -> tuple[TensorValue, TensorValue]:
    """sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    if self.rank == 0:
        return _select(self, 1, dim, True)
    size = static_size(self.shape[normalize_dim(dim, self.rank)])
    assert size is not None  # _static_axis
    return _select(self, size, dim, descending)


@lowering(aten.topk.default, supports=_static_axis)
def topk(
    self: TensorValue,
    k: int,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,
) -> tuple[TensorValue, TensorValue]:
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""
    return _select(self, k, dim, largest)
