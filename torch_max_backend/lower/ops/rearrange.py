"""Ops that move elements without computing on them: flip, repeat, diagonal, as_strided.

Where torch describes the result by strides over storage (diagonal,
as_strided), MAX gets an explicit gather with the same element order: a
functionalized graph has no storage to alias.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..context import current
from ..kit import arg_tensor, empty_input, is_static, node_arg
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import (
    SizeLike,
    normalize_dim,
    positions,
    size_value,
    static_size,
    storage_order,
)

aten = torch.ops.aten


@lowering(aten.flip.default)
def flip(self: TensorValue, dims: Sequence[int]) -> TensorValue:
    """flip(Tensor self, int[] dims) -> Tensor"""
    x = self
    for d in sorted({normalize_dim(d, self.rank) for d in dims}):
        if self.rank == 0:
            break
        pos = positions(x, d)
        reverse = ops.sub(as_tensor(size_value(x.shape[d], -1), DType.int64), pos)
        x = ops.gather(x, reverse, axis=d)
    return x


def _no_zero_repeat(node: torch.fx.Node) -> str | None:
    """Every repeat count at least 1: MAX's tile makes no empty tensor."""
    if any(isinstance(r, int) and r == 0 for r in node_arg(node, 1, "repeats", ())):
        return "repeat with a count of 0 (an empty result)"
    return empty_input(node)


@lowering(aten.repeat.default, supports=_no_zero_repeat)
def repeat(self: TensorValue, repeats: Sequence[SizeLike]) -> TensorValue:
    """repeat(Tensor self, SymInt[] repeats) -> Tensor"""
    # Extra leading repeats add dims of size 1 first, as torch does.
    lead = len(repeats) - self.rank
    x = ops.reshape(self, [1] * lead + list(self.shape)) if lead else self
    if len(repeats) == 0:
        return x
    return ops.tile(x, list(repeats))


def _static_input(node: torch.fx.Node) -> str | None:
    """Input sizes known at compile time."""
    if not is_static(arg_tensor(node, 0).shape):
        return f"{node.target} of a tensor with symbolic sizes"
    return None


@lowering(aten.diagonal.default, supports=_static_input)
def diagonal(
    self: TensorValue, offset: int = 0, dim1: int = 0, dim2: int = 1
) -> TensorValue:
    """diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)"""
    d1, d2 = normalize_dim(dim1, self.rank), normalize_dim(dim2, self.rank)
    rest = [d for d in range(self.rank) if d not in (d1, d2)]
    moved = ops.permute(self, [*rest, d1, d2])
    n1, n2 = (static_size(self.shape[d]) for d in (d1, d2))
    assert n1 is not None and n2 is not None  # _static_input
    rows = np.arange(max(0, min(n1 + min(offset, 0), n2 - max(offset, 0))))
    # Element (i, i + offset) for offset >= 0, (i - offset, i) otherwise.
    flat = (rows - min(offset, 0)) * n2 + rows + max(offset, 0)
    lead = [moved.shape[i] for i in range(len(rest))]
    merged = ops.reshape(moved, [*lead, n1 * n2])
    index = ops.constant(flat.astype(np.int64), DType.int64, device=self.device)
    return ops.gather(merged, index, axis=len(rest))


def _positions(
    size: Sequence[int], stride: Sequence[int], storage_offset: int | None
) -> np.ndarray:
    """The storage position each element of an ``as_strided`` view reads."""
    index = np.full(tuple(size), storage_offset or 0, dtype=np.int64)
    if not size:
        return index
    for d, (n, s) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[d] = n
        index = index + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return index


def _view_of(
    node: torch.fx.Node, scatter: bool
) -> tuple[list[object], list[object], object]:
    """(size, stride, storage_offset) as the node gives them (ints or nodes)."""
    first = 2 if scatter else 1
    size = node_arg(node, first, "size", None)
    stride = node_arg(node, first + 1, "stride", None)
    return list(size), list(stride), node_arg(node, first + 2, "storage_offset", None)


def _strided_view(node: torch.fx.Node, scatter: bool) -> str | None:
    """An ``as_strided`` view the graph value itself holds every element of.

    Strides and offsets address the storage under the value: the value's own
    layout (torch's meta says it) maps storage positions to its elements, and
    a view reading storage outside them (another tensor's) cannot be built.
    """
    meta = arg_tensor(node, 0)
    reason = _static_input(node)
    if reason:
        return reason
    size, stride, offset = _view_of(node, scatter)
    if not is_static([*size, *stride, offset or 0]):
        return f"{node.target} with symbolic sizes, strides or offset"
    if storage_order(meta) is None:
        return f"{node.target} of a tensor with overlapping or gapped strides"
    ints = [int(v) for v in size], [int(v) for v in stride], int(offset or 0)
    positions = _positions(*ints) - meta.storage_offset()
    if positions.size and (positions.min() < 0 or positions.max() >= meta.numel()):
        return f"{node.target} reading storage outside its input's elements"
    if scatter and np.unique(positions).size != positions.size:
        return "as_strided_scatter writing one element twice (overlapping strides)"
    return None


def _storage_and_view(
    x: TensorValue,
    size: Sequence[int],
    stride: Sequence[int],
    storage_offset: int | None,
) -> tuple[TensorValue, np.ndarray, list[int]]:
    """``x``'s elements in storage order (1-d), the position in it of each
    element of the view, and the storage order of ``x``'s dims."""
    meta = arg_tensor(current().node, 0)
    order = storage_order(meta)
    assert order is not None  # _strided_view
    # np.asarray: a 0-d view's positions minus an int are a numpy scalar.
    positions = np.asarray(
        _positions(size, stride, storage_offset) - meta.storage_offset()
    )
    image = ops.permute(x, order) if order != list(range(x.rank)) else x
    return ops.reshape(image, [-1]), positions, order


def _index_constant(positions: np.ndarray) -> TensorValue:
    return ops.constant(positions.reshape(-1), DType.int64, device=current().device)


def _strided_read(node: torch.fx.Node) -> str | None:
    """Static sizes; a dense input (any order of dims) and a view within its elements."""
    return _strided_view(node, scatter=False)


def _strided_write(node: torch.fx.Node) -> str | None:
    """Static sizes; a dense input (any order of dims), a view within its elements, no element written twice."""
    return _strided_view(node, scatter=True)


@lowering(aten.as_strided.default, supports=_strided_read)
def as_strided(
    self: TensorValue,
    size: Sequence[int],
    stride: Sequence[int],
    storage_offset: int | None = None,
) -> TensorValue:
    """as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)"""
    image, positions, _ = _storage_and_view(self, size, stride, storage_offset)
    picked = ops.gather(image, _index_constant(positions), axis=0)
    return ops.reshape(picked, list(size))


@lowering(aten.as_strided_scatter.default, supports=_strided_write)
def as_strided_scatter(
    self: TensorValue,
    src: TensorValue,
    size: Sequence[int],
    stride: Sequence[int],
    storage_offset: int | None = None,
) -> TensorValue:
    """as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor"""
    image, positions, order = _storage_and_view(self, size, stride, storage_offset)
    if positions.size:
        updates = ops.reshape(ops.cast(src, self.dtype), [-1])
        image = ops.scatter(image, updates, _index_constant(positions), axis=0)
    stored = ops.reshape(image, [self.shape[d] for d in order])
    if order == list(range(self.rank)):
        return stored
    return ops.permute(stored, [order.index(d) for d in range(self.rank)])
