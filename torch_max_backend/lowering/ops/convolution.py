"""Convolutions: PyTorch's NCHW / OIHW layouts onto MAX's conv2d."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.graph import TensorValue, ops
from max.graph.type import ConvInputLayout, FilterLayout

from ..registry import lowering

aten = torch.ops.aten


def _conv2d_only(node: torch.fx.Node) -> str | None:
    transposed = node.args[6] if len(node.args) > 6 else node.kwargs.get("transposed")
    if transposed:
        return "transposed convolution"
    weight = node.args[1].meta["val"]
    if weight.dim() not in (3, 4):
        return f"{weight.dim() - 2}-d convolution (1-d and 2-d are supported)"
    return None


def _pair(values: Sequence[int], default: int) -> tuple[int, int]:
    if len(values) == 0:
        return (default, default)
    if len(values) == 1:
        return (values[0], values[0])
    return (values[0], values[1])


@lowering(aten.convolution.default, supports=_conv2d_only)
def convolution(
    input: TensorValue,
    weight: TensorValue,
    bias: TensorValue | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> TensorValue:
    """convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor"""
    one_d = weight.rank == 3
    if one_d:
        # A 1-d convolution is a 2-d one over a height of 1.
        input, weight = ops.unsqueeze(input, 2), ops.unsqueeze(weight, 2)
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
    pad_h, pad_w = _pair(padding, 0)
    # NHWC input and RSCF filter: the layouts MAX's conv2d handles on every device.
    x = ops.permute(input, [0, 2, 3, 1])
    w = ops.permute(weight, [2, 3, 1, 0])
    out = ops.conv2d(
        x,
        w,
        stride=_pair(stride, 1),
        dilation=_pair(dilation, 1),
        padding=(pad_h, pad_h, pad_w, pad_w),
        groups=groups,
        bias=bias,
        input_layout=ConvInputLayout.NHWC,
        filter_layout=FilterLayout.RSCF,
    )
    out = ops.permute(out, [0, 3, 1, 2])
    return ops.squeeze(out, 2) if one_d else out
