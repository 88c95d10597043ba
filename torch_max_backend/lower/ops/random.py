"""Random ops: rand, randn (and their _like forms), randperm and dropout, on MAX's random generators.

Every graph with a random op takes a fresh seed drawn from torch's default
generator at each call (see graph_builder.SEED): results change from call to
call, and ``torch.manual_seed`` makes a run reproducible. The streams are
MAX's, so values differ from eager PyTorch's; their distributions do not.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.dtype import DType
from max.graph import TensorType, TensorValue, ops

from ..context import current
from ..registry import lowering
from ..scalars import as_tensor, out_max_dtype
from ..shapes import SizeLike

aten = torch.ops.aten


def _like(size: Sequence[SizeLike], dtype: DType | None = None) -> TensorType:
    return TensorType(dtype or out_max_dtype(), list(size), current().device)


@lowering(aten.rand.default, random=True)
def rand(
    size: Sequence[SizeLike],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """rand(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return ops.random.uniform(_like(size), range=(0, 1))


@lowering(aten.randn.default, random=True)
def randn(
    size: Sequence[SizeLike],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """randn(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return ops.random.gaussian(_like(size), mean=0.0, std=1.0)


@lowering(aten.rand_like.default, random=True)
def rand_like(
    self: TensorValue,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> TensorValue:
    """rand_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return ops.random.uniform(_like(list(self.shape)), range=(0, 1))


@lowering(aten.randn_like.default, random=True)
def randn_like(
    self: TensorValue,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> TensorValue:
    """randn_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return ops.random.gaussian(_like(list(self.shape)), mean=0.0, std=1.0)


@lowering(aten.randperm.default, random=True)
def randperm(
    n: int,
    *,
    dtype: torch.dtype | None = torch.int64,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """randperm(SymInt n, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    # Sorting n independent uniform keys gives a uniformly random permutation.
    keys = ops.random.uniform(_like([n], DType.float32), range=(0, 1))
    return ops.cast(ops.argsort(keys), out_max_dtype())


@lowering(aten.native_dropout.default, random=True)
def native_dropout(
    input: TensorValue, p: float, train: bool | None
) -> tuple[TensorValue, TensorValue]:
    """native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)"""
    if train is False or p == 0:
        keep = ops.broadcast_to(as_tensor(True, DType.bool), list(input.shape))
        return input, keep
    if p >= 1:
        keep = ops.broadcast_to(as_tensor(False, DType.bool), list(input.shape))
        return ops.mul(input, as_tensor(0, input.dtype)), keep
    draw = ops.random.uniform(_like(list(input.shape), DType.float32), range=(0, 1))
    keep = ops.greater(as_tensor(1 - p, DType.float32), draw)
    scale = as_tensor(1 / (1 - p), input.dtype)
    kept = ops.where(keep, ops.mul(input, scale), as_tensor(0, input.dtype))
    return kept, keep
