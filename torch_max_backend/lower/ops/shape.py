"""Views and shape changes: view, permute, expand, cat, slice, select, squeeze, ...

In a functionalized ATen graph views are plain values, so each of these is a
pure MAX op (MAX materializes or elides copies as it sees fit).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.graph import Dim, TensorValue, ops

from ...dtypes import to_max_dtype
from ..kit import arg_tensor, device_of
from ..registry import lowering
from ..scalars import as_tensor, out_max_dtype, result_dtype
from ..shapes import (
    SizeLike,
    index_along,
    normalize_dim,
    size_product,
    static_size,
)

aten = torch.ops.aten

# torch passes "to the end" as the largest int64.
_INT64_MAX = 2**63 - 1


@lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(self: TensorValue, size: Sequence[SizeLike]) -> TensorValue:
    """view(Tensor(a) self, SymInt[] size) -> Tensor(a)
    _unsafe_view(Tensor self, SymInt[] size) -> Tensor
    reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)
    """
    try:
        return ops.reshape(self, list(size))
    except ValueError:
        if all(isinstance(s, int) for s in size):
            raise
    # MAX could not prove that the element counts match (a symbolic size
    # with a -1 beside it: x.view(n // 2, -1)); torch's tracing did. The
    # flattened values are checked against the new count at run time, then
    # split into the new sizes, whose product that count is by construction.
    inferred = [isinstance(s, int) and s == -1 for s in size]
    given = [s for s, infer in zip(size, inferred, strict=True) if not infer]
    rest = size_product(self.shape) // size_product(given)
    dims = [rest if infer else s for s, infer in zip(size, inferred, strict=True)]
    flat = ops.reshape(self, [-1]).rebind([size_product(dims)], "view: sizes differ")
    return ops.reshape(flat, dims)


@lowering(aten.permute.default)
def permute(self: TensorValue, dims: Sequence[int]) -> TensorValue:
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)"""
    if self.rank == 0:
        return self  # MAX's permute takes no empty order
    return ops.permute(self, [normalize_dim(d, self.rank) for d in dims])


@lowering(aten.transpose.int)
def transpose(self: TensorValue, dim0: int, dim1: int) -> TensorValue:
    """transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"""
    if self.rank < 2:
        return self
    return ops.transpose(
        self, normalize_dim(dim0, self.rank), normalize_dim(dim1, self.rank)
    )


@lowering(aten.t.default)
def t(self: TensorValue) -> TensorValue:
    """t(Tensor(a) self) -> Tensor(a)"""
    return self if self.rank < 2 else ops.transpose(self, 0, 1)


@lowering(aten.expand.default)
def expand(
    self: TensorValue, size: Sequence[SizeLike], *, implicit: bool = False
) -> TensorValue:
    """expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"""
    lead = len(size) - self.rank
    target: list[SizeLike] = []
    for i, s in enumerate(size):
        # -1 keeps the input's size for that dim.
        target.append(self.shape[i - lead] if isinstance(s, int) and s == -1 else s)
    return ops.broadcast_to(self, target)


@lowering(aten.cat.default)
def cat(tensors: Sequence[TensorValue], dim: int = 0) -> TensorValue:
    """cat(Tensor[] tensors, int dim=0) -> Tensor"""
    dtype = to_max_dtype(result_dtype(*tensors))
    # torch still accepts 1-d empty tensors beside tensors of any rank.
    kept = [
        as_tensor(t, dtype)
        for t in tensors
        if not (t.rank == 1 and static_size(t.shape[0]) == 0)
    ]
    if not kept:
        return as_tensor(tensors[0], dtype)
    if len(kept) == 1:
        return kept[0]
    return ops.concat(kept, normalize_dim(dim, kept[0].rank))


def _clamp_index(index: int, size: int | None) -> int | None:
    if size is None:
        return index if index >= 0 else None
    if index < 0:
        index += size
    return min(max(index, 0), size)


@lowering(aten.slice.Tensor)
def slice_tensor(
    self: TensorValue,
    dim: int = 0,
    start: int | Dim | None = None,
    end: int | Dim | None = None,
    step: int = 1,
) -> TensorValue:
    """slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)"""
    axis = normalize_dim(dim, self.rank)
    size = static_size(self.shape[axis])
    if isinstance(start, int):
        start = _clamp_index(start, size)
    if isinstance(end, int):
        end = None if end >= _INT64_MAX else _clamp_index(end, size)
    if start == 0:
        start = None
    if start is None and end is None and step == 1:
        return self
    return index_along(self, axis, slice(start, end, step))


@lowering(aten.select.int)
def select(self: TensorValue, dim: int, index: int) -> TensorValue:
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"""
    axis = normalize_dim(dim, self.rank)
    size = static_size(self.shape[axis])
    if index < 0 and size is not None:
        index += size
    return index_along(self, axis, index)


@lowering(aten.unsqueeze.default)
def unsqueeze(self: TensorValue, dim: int) -> TensorValue:
    """unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"""
    return ops.unsqueeze(self, normalize_dim(dim, self.rank + 1))


def _squeeze(x: TensorValue, dims: Sequence[int]) -> TensorValue:
    # Only dims of size 1 go, as in torch; others are silently kept.
    axes = sorted({normalize_dim(d, x.rank) for d in dims}, reverse=True)
    for axis in axes:
        if static_size(x.shape[axis]) == 1:
            x = ops.squeeze(x, axis)
    return x


@lowering(aten.squeeze.dim)
def squeeze_dim(self: TensorValue, dim: int) -> TensorValue:
    """squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)"""
    return _squeeze(self, [dim]) if self.rank else self


@lowering(aten.squeeze.dims)
def squeeze_dims(self: TensorValue, dim: Sequence[int]) -> TensorValue:
    """squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)"""
    return _squeeze(self, dim) if self.rank else self


@lowering(aten.squeeze.default)
def squeeze(self: TensorValue) -> TensorValue:
    """squeeze(Tensor(a) self) -> Tensor(a)"""
    return _squeeze(self, range(self.rank))


@lowering(
    aten.clone.default,
    aten.alias.default,
    aten.lift_fresh_copy.default,
    aten.detach.default,
)
def clone(
    self: TensorValue, *, memory_format: torch.memory_format | None = None
) -> TensorValue:
    """clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor
    alias(Tensor(a) self) -> Tensor(a)
    lift_fresh_copy(Tensor self) -> Tensor
    detach(Tensor(a) self) -> Tensor(a)
    """
    return self


@lowering(torch.ops.prims.copy_strided.default)
def copy_strided(self: TensorValue, stride: Sequence[object]) -> TensorValue:
    """prims::copy_strided(Tensor a, SymInt[] stride) -> Tensor

    The values as they are: a graph holds no layouts. The strides are the
    node's own (its traced meta), which a graph output or a strided view
    reading it follows (passes/strided_copies.py drops the copies nothing
    reads the strides of)."""
    return self


def _same_device(node: torch.fx.Node) -> str | None:
    """No device change inside a graph (one MAX graph runs on one device)."""
    device = node.kwargs.get("device")
    if device is None:
        return None
    source = device_of(arg_tensor(node, 0))
    if torch.device(device) != source:
        return f"copy between devices ({source} -> {device})"
    return None


@lowering(aten._to_copy.default, supports=_same_device)
def to_copy(
    self: TensorValue,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    non_blocking: bool = False,
    memory_format: torch.memory_format | None = None,
) -> TensorValue:
    """_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor"""
    return as_tensor(self, out_max_dtype())


@lowering(torch.ops.prims.convert_element_type.default)
def convert_element_type(self: TensorValue, dtype: torch.dtype) -> TensorValue:
    """prims::convert_element_type(Tensor a, ScalarType dtype) -> Tensor"""
    # AOTAutograd emits it for Python float arithmetic on symbolic floats
    # (``torch.compile(dynamic=True)`` makes float arguments graph inputs).
    return as_tensor(self, to_max_dtype(dtype))


@lowering(aten.copy.default, aten.copy_.default)
def copy(
    self: TensorValue, src: TensorValue, non_blocking: bool = False
) -> TensorValue:
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor
    copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)
    """
    value = as_tensor(src, self.dtype)
    if value.device != self.device:
        value = ops.transfer_to(value, self.device)
    return ops.broadcast_to(value, self.shape)


@lowering(aten.split_with_sizes.default)
def split_with_sizes(
    self: TensorValue, split_sizes: Sequence[SizeLike], dim: int = 0
) -> list[TensorValue]:
    """split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]"""
    return ops.split(self, list(split_sizes), normalize_dim(dim, self.rank))


@lowering(aten.split.Tensor)
def split(self: TensorValue, split_size: int, dim: int = 0) -> list[TensorValue]:
    """split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"""
    axis = normalize_dim(dim, self.rank)
    size = static_size(self.shape[axis])
    if size is None:
        raise NotImplementedError("split of a dimension of symbolic size")
    sizes = [split_size] * (size // split_size)
    if size % split_size:
        sizes.append(size % split_size)
    return ops.split(self, sizes, axis)
