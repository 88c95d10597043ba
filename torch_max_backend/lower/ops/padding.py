"""Padding: constant, reflection and replication, onto MAX's ``ops.pad``.

torch lists pads as (before, after) pairs starting from the last dim; MAX
wants one pair for every dim, starting from the first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from max.dtype import DType
from max.graph import DeviceRef, Dim, TensorValue, ops
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..kit import arg_tensor, is_static, schema_args
from ..registry import lowering
from ..scalars import Operand, as_tensor
from ..shapes import index_along

aten = torch.ops.aten


def _max_paddings(rank: int, pad: Sequence[int | Dim]) -> list[int | Dim]:
    paddings = [0] * (2 * rank)
    for i in range(len(pad) // 2):
        dim = rank - 1 - i
        paddings[2 * dim] = pad[2 * i]
        paddings[2 * dim + 1] = pad[2 * i + 1]
    return paddings


def _crop_negative(
    x: TensorValue, paddings: list[int]
) -> tuple[TensorValue, list[int]]:
    """Negative pads crop: slice them off; the positive ones are left to pad."""
    if all(p >= 0 for p in paddings):
        return x, paddings
    crops = [
        slice(-min(before, 0), min(after, 0) or None)
        for before, after in zip(paddings[::2], paddings[1::2], strict=True)
    ]
    return ops.slice_tensor(x, crops), [max(p, 0) for p in paddings]


def _pads(node: torch.fx.Node) -> list[object]:
    """The pad amounts (argument 1: ``pad`` or ``padding`` by the op)."""
    args = schema_args(node)
    return list(args["pad"] if "pad" in args else args["padding"])


def _int_pads(node: torch.fx.Node) -> str | None:
    if not is_static(_pads(node)):
        return "padding by symbolic amounts"
    return None


def _constant_pads(node: torch.fx.Node) -> str | None:
    """Static pad amounts, negative ones cropping a static dim; or symbolic
    amounts known never to be negative (Swin's ``(4 - h % 4) % 4``)."""
    pad = _pads(node)
    if not is_static(pad):
        if all((isinstance(p, int) and p >= 0) or _never_negative(p) for p in pad):
            return None
        return "padding by symbolic amounts that may be negative"
    shape = arg_tensor(node, 0).shape
    for i in range(len(pad) // 2):
        if min(pad[2 * i], pad[2 * i + 1]) < 0 and not isinstance(shape[-1 - i], int):
            return "cropping a symbolic dim by a negative pad"
    return None


def _never_negative(amount: object) -> bool:
    if isinstance(amount, torch.fx.Node):
        amount = amount.meta.get("val")
    if not isinstance(amount, torch.SymInt):
        return False
    if statically_known_true(amount >= 0):  # from the ranges, adding no guard
        return True
    # An int argument, which a MAX dim carries only when it is at least 0
    # (builder/int_inputs.py): guarded on that, as it would be there.
    return amount.node.expr.is_Symbol and bool(amount >= 0)


def _non_negative_pads(node: torch.fx.Node) -> str | None:
    """Static, non-negative pad amounts."""
    reason = _int_pads(node)
    if reason is None and any(p < 0 for p in _pads(node)):
        # MAX's pad takes no negative amounts, and these are rare.
        return "reflection padding by negative amounts"
    return reason


def _replication_pads(node: torch.fx.Node) -> str | None:
    """Static pad amounts; negative ones crop a static dim."""
    # A negative amount crops, as in constant padding; only a static size
    # can be cropped.
    return _constant_pads(node)


@lowering(aten.constant_pad_nd.default, supports=_constant_pads)
def constant_pad_nd(
    self: TensorValue, pad: Sequence[int], value: Operand = 0
) -> TensorValue:
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor"""
    if not all(isinstance(p, int) for p in pad):
        return _pad_by_concat(self, _max_paddings(self.rank, pad), value)
    self, paddings = _crop_negative(self, _max_paddings(self.rank, pad))
    # ops.pad reads the fill value on the host (it builds its own constants
    # there), so a lifted scalar on an accelerator is moved to the CPU.
    fill = ops.transfer_to(as_tensor(value, self.dtype), DeviceRef.CPU())
    return ops.pad(self, paddings, mode="constant", value=fill)


def _pad_by_concat(
    x: TensorValue, paddings: Sequence[int | Dim], value: Operand
) -> TensorValue:
    """Pads of symbolic (never negative) amounts, which MAX's pad does not
    take: the fill value broadcast to each pad's shape, joined to ``x``."""
    fill = as_tensor(value, x.dtype)
    for axis in range(x.rank):
        parts = []
        for amount in paddings[2 * axis : 2 * axis + 2]:
            if isinstance(amount, int) and amount == 0:
                parts.append(None)
                continue
            shape = list(x.shape)
            shape[axis] = amount
            parts.append(ops.broadcast_to(fill, shape))
        before, after = parts
        if before is not None or after is not None:
            pieces = [p for p in (before, x, after) if p is not None]
            x = ops.concat(pieces, axis)
    return x


@lowering(
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
    supports=_non_negative_pads,
)
def reflection_pad(self: TensorValue, padding: Sequence[int]) -> TensorValue:
    """reflection_pad1d(Tensor self, SymInt[2] padding) -> Tensor
    reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor
    reflection_pad3d(Tensor self, SymInt[6] padding) -> Tensor
    """
    # MAX's "reflect" excludes the edge element, as torch's reflection does.
    return ops.pad(self, _max_paddings(self.rank, padding), mode="reflect")


@lowering(
    aten.replication_pad2d.default,
    aten.replication_pad3d.default,
    supports=_replication_pads,
)
def replication_pad(self: TensorValue, padding: Sequence[int]) -> TensorValue:
    """replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor
    replication_pad3d(Tensor self, SymInt[6] padding) -> Tensor
    """
    paddings = _max_paddings(self.rank, padding)
    for axis in range(self.rank):
        before, after = paddings[2 * axis], paddings[2 * axis + 1]
        if before >= 0 and after >= 0:
            continue
        # A negative amount: output i reads input clamp(i - before, 0, n - 1),
        # which a crop cannot give when it would empty the axis.
        n = int(self.shape[axis])
        source = np.clip(np.arange(n + before + after) - before, 0, n - 1)
        index = ops.constant(source, DType.int64, device=self.device)
        self = ops.gather(self, index, axis=axis)
        paddings[2 * axis] = paddings[2 * axis + 1] = 0
    return ops.pad(self, paddings, mode="edge")


def _non_negative_replication_pads(node: torch.fx.Node) -> str | None:
    """Static, non-negative pad amounts of static dims."""
    args = schema_args(node)
    pads = list(args["padding"])
    if not is_static(pads):
        return "padding by symbolic amounts"
    if any(p < 0 for p in pads):
        return "the gradient of replication padding by negative amounts"
    padded = arg_tensor(node, 1).shape[-(len(pads) // 2) :]
    if not is_static(padded):
        return "the gradient of replication padding along symbolic dims"
    return None


@lowering(
    aten.replication_pad1d_backward.default,
    aten.replication_pad2d_backward.default,
    aten.replication_pad3d_backward.default,
    supports=_non_negative_replication_pads,
)
def replication_pad_backward(
    grad_output: TensorValue, self: TensorValue, padding: Sequence[int]
) -> TensorValue:
    """replication_pad1d_backward(Tensor grad_output, Tensor self, SymInt[2] padding) -> Tensor
    replication_pad2d_backward(Tensor grad_output, Tensor self, SymInt[4] padding) -> Tensor
    replication_pad3d_backward(Tensor grad_output, Tensor self, SymInt[6] padding) -> Tensor
    """
    grad = grad_output
    paddings = _max_paddings(grad.rank, padding)
    for axis in range(grad.rank):
        before, after = paddings[2 * axis], paddings[2 * axis + 1]
        if before == 0 and after == 0:
            continue
        # Each edge element was copied into its pad: it gathers the pad's
        # gradient and its own; the elements between keep theirs.
        n = int(self.shape[axis])
        length = int(grad.shape[axis])
        first = ops.sum(index_along(grad, axis, slice(0, before + 1)), axis)
        if n == 1:
            grad = ops.sum(grad, axis)
            continue
        last = ops.sum(index_along(grad, axis, slice(before + n - 1, length)), axis)
        inner = index_along(grad, axis, slice(before + 1, before + n - 1))
        parts = [first, inner, last] if n > 2 else [first, last]
        grad = ops.concat(parts, axis)
    return grad
