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
from ..registry import lowering
from ..shapes import SizeLike, normalize_dim, positions, static_size

aten = torch.ops.aten


@lowering(aten.flip.default)
def flip(self: TensorValue, dims: Sequence[int]) -> TensorValue:
    """flip(Tensor self, int[] dims) -> Tensor"""
    x = self
    for d in sorted({normalize_dim(d, self.rank) for d in dims}):
        if self.rank == 0:
            break
        pos = positions(x, d)
        last = ops.cast(ops.shape_to_tensor([x.shape[d]]).reshape([]), DType.int64)
        reverse = ops.sub(ops.sub(last, ops.constant(1, DType.int64, x.device)), pos)
        x = ops.gather(x, reverse, axis=d)
    return x


@lowering(aten.repeat.default)
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
    meta = node.args[0].meta["val"]
    if not all(isinstance(s, int) for s in meta.shape):
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


def _dense_source(node: torch.fx.Node) -> str | None:
    """A contiguous input with storage offset 0 and static sizes."""
    meta = node.args[0].meta["val"]
    reason = _static_input(node)
    if reason:
        return reason
    if not meta.is_contiguous() or meta.storage_offset() != 0:
        # The strides then refer to storage this graph value does not own.
        return "as_strided of a non-contiguous or offset tensor"
    return None


@lowering(aten.as_strided.default, supports=_dense_source)
def as_strided(
    self: TensorValue,
    size: Sequence[int],
    stride: Sequence[int],
    storage_offset: int | None = None,
) -> TensorValue:
    """as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)"""
    index = np.full(tuple(size), storage_offset or 0, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[d] = n
        index = index + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    flat = ops.reshape(self, [-1])
    picked = ops.gather(
        flat,
        ops.constant(index.reshape(-1), DType.int64, device=current().device),
        axis=0,
    )
    return ops.reshape(picked, list(size))
