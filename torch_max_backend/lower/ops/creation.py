"""Tensors made from sizes and values: full, scalar_tensor, arange, ..."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from max.dtype import DType
from max.graph import Dim, TensorValue, ops

from ..context import current
from ..kit import node_arg
from ..registry import lowering
from ..scalars import Operand, as_tensor, out_max_dtype
from ..shapes import SizeLike

aten = torch.ops.aten


def _filled(shape: Sequence[SizeLike], value: Operand) -> TensorValue:
    scalar = as_tensor(value, out_max_dtype())
    return ops.broadcast_to(scalar, list(shape)) if len(shape) else scalar


@lowering(aten.full.default)
def full(
    size: Sequence[SizeLike],
    fill_value: Operand,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return _filled(size, fill_value)


@lowering(aten.full_like.default)
def full_like(
    self: TensorValue,
    fill_value: Operand,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> TensorValue:
    """full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return _filled(list(self.shape), fill_value)


@lowering(aten.empty.memory_format)
def empty(
    size: Sequence[SizeLike],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> TensorValue:
    """empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    # Uninitialized memory may hold anything; zeros are one valid choice.
    return _filled(size, 0)


@lowering(aten.empty_permuted.default)
def empty_permuted(
    size: Sequence[SizeLike],
    physical_layout: Sequence[int],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """empty_permuted(SymInt[] size, int[] physical_layout, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    # empty_like of a strided tensor; the layout is torch's affair (our
    # outputs are laid out by torch's meta), the values anything.
    return _filled(size, 0)


@lowering(aten.scalar_tensor.default)
def scalar_tensor(
    s: Operand,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return as_tensor(s, out_max_dtype())


def _range_supported(node: torch.fx.Node) -> str | None:
    """Static bounds, or symbolic integer bounds with a constant positive step."""
    symbolic = [a for a in node.args if isinstance(a, torch.fx.Node)]
    if not symbolic:
        return None
    if not all(isinstance(a.meta.get("val"), torch.SymInt) for a in symbolic):
        return "arange with symbolic non-integer bounds"
    step = node_arg(node, 2, "step", 1)
    if not isinstance(step, int) or step <= 0:
        return "arange with symbolic bounds and a step that is not a positive constant"
    return None


def _bound(value: int | Dim) -> TensorValue:
    if isinstance(value, Dim):
        return ops.cast(ops.shape_to_tensor([value]).reshape([]), DType.int64)
    return ops.constant(value, DType.int64, device=current().device)


def _symbolic_range(start: int | Dim, end: int | Dim, step: int) -> TensorValue:
    # Sizes known only at run time: the length is a MAX shape expression,
    # ceil((end - start) / step), and the bounds are read from it at run time.
    length = Dim(end) - Dim(start)
    if step != 1:
        length = (length + (step - 1)) // step
    device = current().device
    values = ops.range(
        _bound(start),
        _bound(end),
        _bound(step),
        out_dim=length,
        dtype=DType.int64,
        device=device,
    )
    return ops.cast(values, out_max_dtype())


@lowering(
    aten.arange.start_step,
    aten.arange.start,
    lift_scalars=False,
    supports=_range_supported,
)
def arange(
    start: int | float | Dim,
    end: int | float | Dim,
    step: int | float = 1,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
    arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor
    """
    if isinstance(start, Dim) or isinstance(end, Dim):
        return _symbolic_range(start, end, int(step))
    length = max(0, math.ceil((end - start) / step))
    out = out_max_dtype()
    # The end is recomputed from the length so that MAX's shape inference
    # agrees with torch's ceil((end - start) / step).
    return ops.range(
        start,
        start + length * step,
        step,
        out_dim=length,
        dtype=out,
        device=current().device,
    )


@lowering(aten.arange.default, lift_scalars=False, supports=_range_supported)
def arange_end(
    end: int | float | Dim,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return arange(0, end, 1)


@lowering(aten.fill.Scalar)
def fill(self: TensorValue, value: Operand) -> TensorValue:
    """fill.Scalar(Tensor self, Scalar value) -> Tensor"""
    return _filled(list(self.shape), value)


@lowering(aten.empty_strided.default)
def empty_strided(
    size: Sequence[SizeLike],
    stride: Sequence[SizeLike],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    # Strides describe memory layout, which MAX values do not have.
    return _filled(size, 0)
