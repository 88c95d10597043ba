"""Convolutions: PyTorch's NC(D)HW / OI(D)HW layouts onto MAX's conv2d and conv3d."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.graph import TensorValue, ops
from max.graph.type import ConvInputLayout, FilterLayout

from ..registry import lowering
from .transposed_conv import over_unit_height, pair, per_axis, transposed_conv2d

aten = torch.ops.aten


def _covered(node: torch.fx.Node) -> str | None:
    """1-d, 2-d and 3-d convolutions; transposed ones in 1-d and 2-d with static channel and spatial sizes."""
    transposed = node.args[6] if len(node.args) > 6 else node.kwargs.get("transposed")
    input, weight = (node.args[i].meta["val"] for i in range(2))
    spatial = weight.dim() - 2
    if spatial not in (1, 2, 3):
        return f"{spatial}-d convolution (1-d, 2-d and 3-d are supported)"
    if transposed:
        if spatial == 3:
            return "3-d transposed convolution (1-d and 2-d are supported)"
        # The zero-spreading and cropping are sliced by static sizes.
        if not all(isinstance(s, int) for s in (*input.shape[1:], *weight.shape)):
            return "transposed convolution with symbolic channel or spatial sizes"
    return None


def _channels_last(x: TensorValue) -> TensorValue:
    return ops.permute(x, [0, *range(2, x.rank), 1])


def _channels_first(x: TensorValue) -> TensorValue:
    return ops.permute(x, [0, x.rank - 1, *range(1, x.rank - 1)])


def _add_bias(out: TensorValue, bias: TensorValue | None) -> TensorValue:
    if bias is None:
        return out
    return ops.add(out, ops.reshape(bias, [1, -1] + [1] * (out.rank - 2)))


def _transposed(
    input: TensorValue,
    weight: TensorValue,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    output_padding: tuple[int, int],
    groups: int,
) -> TensorValue:
    size = tuple(
        (int(n) - 1) * s - 2 * p + d * (int(k) - 1) + op + 1
        for n, k, s, p, d, op in zip(
            input.shape[2:],
            weight.shape[2:],
            stride,
            padding,
            dilation,
            output_padding,
            strict=True,
        )
    )
    return transposed_conv2d(
        input, weight, (size[0], size[1]), stride, padding, dilation, groups
    )


@lowering(aten.convolution.default, supports=_covered)
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
        stride, padding, dilation = over_unit_height(stride, padding, dilation)
        output_padding = [0, *output_padding]
    if transposed:
        out = _transposed(
            input,
            weight,
            pair(stride, 1),
            pair(padding, 0),
            pair(dilation, 1),
            pair(output_padding, 0),
            groups,
        )
        out = _add_bias(out, bias)
    elif weight.rank == 5:
        d = per_axis(padding, 3, 0)
        # NDHWC input and QRSCF filter, MAX's layouts for conv3d.
        out = ops.conv3d(
            _channels_last(input),
            ops.permute(weight, [2, 3, 4, 1, 0]),
            stride=per_axis(stride, 3, 1),
            dilation=per_axis(dilation, 3, 1),
            padding=(d[0], d[0], d[1], d[1], d[2], d[2]),
            groups=groups,
            bias=bias,
            input_layout=ConvInputLayout.NHWC,
            filter_layout=FilterLayout.QRSCF,
        )
        out = _channels_first(out)
    else:
        pad_h, pad_w = pair(padding, 0)
        # NHWC input and RSCF filter: the layouts MAX's conv2d handles on every device.
        out = ops.conv2d(
            _channels_last(input),
            ops.permute(weight, [2, 3, 1, 0]),
            stride=pair(stride, 1),
            dilation=pair(dilation, 1),
            padding=(pad_h, pad_h, pad_w, pad_w),
            groups=groups,
            bias=bias,
            input_layout=ConvInputLayout.NHWC,
            filter_layout=FilterLayout.RSCF,
        )
        out = _channels_first(out)
    return ops.squeeze(out, 2) if one_d else out
