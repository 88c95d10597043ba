"""Pooling: PyTorch's NCHW pooling onto MAX's NHWC pooling ops."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from max.graph import TensorValue, ops

from ..registry import lowering
from ..shapes import static_size

aten = torch.ops.aten


def _pair(values: Sequence[int] | int, default: Sequence[int]) -> tuple[int, int]:
    if isinstance(values, int):
        return (values, values)
    if len(values) == 0:
        return (default[0], default[1])
    if len(values) == 1:
        return (values[0], values[0])
    return (values[0], values[1])


def _nhwc(x: TensorValue) -> TensorValue:
    return ops.permute(x, [0, 2, 3, 1])


def _nchw(x: TensorValue) -> TensorValue:
    return ops.permute(x, [0, 3, 1, 2])


def _batched(x: TensorValue) -> tuple[TensorValue, bool]:
    # torch also pools unbatched CHW tensors.
    return (ops.unsqueeze(x, 0), True) if x.rank == 3 else (x, False)


def _indices_unused(node: torch.fx.Node) -> str | None:
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            return "max pooling whose indices are used (training)"
    return None


@lowering(aten.max_pool2d_with_indices.default, supports=_indices_unused)
def max_pool2d_with_indices(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[TensorValue, TensorValue]:
    """max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""
    x, unbatched = _batched(self)
    kernel = _pair(kernel_size, kernel_size)
    out = _nchw(
        ops.max_pool2d(
            _nhwc(x),
            kernel,
            stride=_pair(stride, kernel),
            dilation=_pair(dilation, (1, 1)),
            padding=_pair(padding, (0, 0)),
            ceil_mode=ceil_mode,
        )
    )
    if unbatched:
        out = ops.squeeze(out, 0)
    # The capability check admits only graphs that never read the indices.
    return out, out


def _no_divisor_override(node: torch.fx.Node) -> str | None:
    override = (
        node.args[6] if len(node.args) > 6 else node.kwargs.get("divisor_override")
    )
    return "avg_pool2d with divisor_override" if override is not None else None


@lowering(aten.avg_pool2d.default, supports=_no_divisor_override)
def avg_pool2d(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> TensorValue:
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    x, unbatched = _batched(self)
    kernel = _pair(kernel_size, kernel_size)
    out = _nchw(
        ops.avg_pool2d(
            _nhwc(x),
            kernel,
            stride=_pair(stride, kernel),
            padding=_pair(padding, (0, 0)),
            ceil_mode=ceil_mode,
            count_boundary=count_include_pad,
        )
    )
    return ops.squeeze(out, 0) if unbatched else out


def _divisible(node: torch.fx.Node) -> str | None:
    shape = node.args[0].meta["val"].shape
    for size, out in zip(shape[-2:], node.args[1], strict=True):
        if not isinstance(size, int) or size % out:
            return f"adaptive pooling of size {size} to {out} (only exact divisions)"
    return None


@lowering(aten._adaptive_avg_pool2d.default, supports=_divisible)
def adaptive_avg_pool2d(self: TensorValue, output_size: Sequence[int]) -> TensorValue:
    """_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor"""
    h, w = (static_size(d) for d in list(self.shape)[-2:])
    assert h is not None and w is not None  # guaranteed by _divisible
    kernel = (h // output_size[0], w // output_size[1])
    return avg_pool2d(self, list(kernel), list(kernel))
