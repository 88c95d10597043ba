"""Convolution's backward op, in 1-d, 2-d and 3-d, plain and transposed.

AOTAutograd leaves ``convolution_backward`` in backward graphs. It returns
its gradients as a tuple and computes only those asked for by
``output_mask`` (torch's meta then says None for the others).

A transposed convolution is the input gradient of the plain one with the
same weight, so its gradients are the plain one's with the roles swapped:
its input's gradient is the plain convolution of the output gradient, and
its weight's gradient is the plain one's weight gradient with the
transposed convolution's input in the output gradient's place.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from max.graph import Dim, TensorValue, ops

from .. import conv_columns, depthwise_conv
from ..context import current
from ..conv_pixels import weight_grad_by_pixels
from ..float32_products import matmul
from ..kit import arg_tensor, device_of, is_static, node_arg
from ..opmath import accumulated
from ..output_meta import in_meta_dtypes, wanted_outputs
from ..reduced_axes import sum_to
from ..registry import lowering
from ..shapes import size_like, static_size
from ..transposed_conv import (
    crop,
    forward_conv,
    over_unit_height,
    per_axis,
    transposed_conv,
)

aten = torch.ops.aten


def _covered(node: torch.fx.Node) -> str | None:
    """1-d, 2-d and 3-d convolutions, plain and transposed, with static
    channel and kernel sizes; static spatial sizes too, but for ungrouped,
    plain 1-d and 2-d ones on the CPU (their window kernels read the sizes
    at run time)."""
    grad, input, weight = (arg_tensor(node, i) for i in range(3))
    if weight.dim() not in (3, 4, 5):
        return f"{weight.dim() - 2}-d convolution (1-d, 2-d and 3-d are supported)"
    # The batch may be symbolic; channels and kernel sizes decide the
    # slicing of the lowering.
    if not is_static((input.shape[1], grad.shape[1], *weight.shape)):
        return "convolution backward with symbolic channel or kernel sizes"
    if is_static((*input.shape[2:], *grad.shape[2:])):
        return None
    if _by_window_kernels(node):
        return None
    return (
        "convolution backward with symbolic spatial sizes (taken for "
        "ungrouped, plain 1-d and 2-d convolutions on the CPU)"
    )


def _by_window_kernels(node: torch.fx.Node) -> bool:
    """An ungrouped, plain 1-d or 2-d convolution on the CPU."""
    weight = arg_tensor(node, 2)
    transposed = node_arg(node, 7, "transposed", False)
    groups = node_arg(node, 9, "groups", 1)
    device = device_of(arg_tensor(node, 0)).type
    return weight.dim() in (3, 4) and not transposed and groups == 1 and device == "cpu"


def _windows(
    input: TensorValue,
    out_size: Sequence[int | Dim],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> TensorValue:
    """The input's sliding windows, [N, C * prod(kernel), *out_size]: our
    im2col kernel for 2-d on the CPU, one strided slice of the padded input
    per kernel offset and a stack otherwise (the same order: torch's (c,
    *kernel) per channel)."""
    if len(kernel) == 2 and current().device.is_cpu():
        return conv_columns.windows(
            input, list(out_size), tuple(kernel), stride, padding, dilation
        )
    pads = [0, 0, 0, 0, *(p for p in padding for _ in range(2))]
    x = ops.pad(input, pads) if any(padding) else input
    windows = []
    for offset in itertools.product(*(range(k) for k in kernel)):
        index = [slice(None), slice(None)]
        for k, out, s, d in zip(offset, out_size, stride, dilation, strict=True):
            index.append(slice(k * d, k * d + (out - 1) * s + 1, s))
        windows.append(x[tuple(index)])
    cols = ops.stack(windows, axis=2)
    return ops.reshape(cols, [input.shape[0], -1, *out_size])


def _grouped_weight_grad(
    grad: TensorValue,
    input: TensorValue,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> TensorValue:
    """A convolution's weight gradient, one batched matmul over the groups:
    the grad times the input's sliding windows. A 2-d depthwise one (one
    input channel per group) on the CPU is summed by one kernel instead."""
    channels = int(input.shape[1])
    out_channels = int(grad.shape[1])
    c_group = channels // groups
    o_group = out_channels // groups
    on_cpu = len(kernel) == 2 and current().device.is_cpu()
    if on_cpu and depthwise_conv.kernels_take(grad, channels, groups):
        return depthwise_conv.depthwise_weight_grad(
            grad, input, kernel, stride, padding, dilation
        )
    if c_group == 1 and on_cpu:

        def summed(g: TensorValue, x: TensorValue) -> TensorValue:
            return conv_columns.depthwise_weight_grad(
                g, x, tuple(kernel), stride, padding, dilation
            )

        return accumulated(summed, grad, input)
    out_size = [int(d) for d in grad.shape[2:]]
    cols = _windows(input, out_size, kernel, stride, padding, dilation)
    # Explicit (possibly symbolic) sizes, not -1: MAX must see that both
    # matmul operands share the contracted batch * blocks dim.
    n = grad.shape[0]
    blocks = math.prod(out_size)
    rows = c_group * math.prod(kernel)
    cols = ops.reshape(cols, [n, groups, rows, blocks])
    cols = ops.reshape(ops.permute(cols, [1, 0, 3, 2]), [groups, n * blocks, rows])
    g = ops.reshape(grad, [n, groups, o_group, blocks])
    g = ops.reshape(ops.permute(g, [1, 2, 0, 3]), [groups, o_group, n * blocks])
    # [groups, O / groups, C / groups * prod(kernel)]
    weight_grad = accumulated(matmul, g, cols)
    return ops.reshape(weight_grad, [out_channels, c_group, *kernel])


def _fitted(
    input: TensorValue,
    out_size: Sequence[int | Dim],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> tuple[TensorValue, Sequence[int]]:
    """``input`` and a padding whose windows are exactly ``out_size``.

    Our window kernels derive their output size from the input's. A
    transposed convolution's output padding can leave its output (the
    windows' input here) rows past the last window, enough for one more
    where the padding is at least the stride: then the rows the windows
    read are padded and cut explicitly.
    """
    if not all(isinstance(size_like(d), int) for d in (*input.shape[2:], *out_size)):
        return input, padding  # a plain convolution's windows always fit
    sizes = [int(n) for n in input.shape[2:]]
    window = (kernel, stride, padding, dilation)
    derived = [
        (n + 2 * p - d * (k - 1) - 1) // s + 1
        for n, k, s, p, d in zip(sizes, *window, strict=True)
    ]
    if derived == list(out_size):
        return input, padding
    pads = [0, 0, 0, 0]
    for axis, (n, out, k, s, p, d) in enumerate(
        zip(sizes, out_size, *window, strict=True)
    ):
        after = (out - 1) * s + d * (k - 1) + 1 - p - n
        input = crop(input, axis + 2, 0, max(0, -after))
        pads += [p, max(0, after)]
    return ops.pad(input, pads), (0,) * len(sizes)


def _weight_grad(
    grad: TensorValue,
    input: TensorValue,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    channels_last: bool = False,
) -> TensorValue:
    """The weight gradient of the plain convolution of ``input`` whose
    output's gradient is ``grad``: on the CPU an ungrouped 2-d one is a
    product with its windows' matrix (conv_columns.py), or, for a filter
    given ``channels_last``, with its windows a pixel a row (conv_pixels.py)."""
    out_size = [size_like(d) for d in grad.shape[2:]]
    given = input
    input, padding = _fitted(input, out_size, kernel, stride, padding, dilation)
    if groups == 1 and len(kernel) == 2 and current().device.is_cpu():
        static = all(isinstance(s, int) for s in out_size)
        if channels_last and static and input is given:
            # A channels-last model's filter: its gradient in its order.
            return weight_grad_by_pixels(
                grad, input, (kernel[0], kernel[1]), stride, padding, dilation
            )
        return conv_columns.weight_grad(
            grad, input, tuple(kernel), stride, padding, dilation
        )
    return _grouped_weight_grad(grad, input, kernel, stride, padding, dilation, groups)


# The most output pixels of a stride-1 convolution whose input gradient is
# built by col2im; past it MAX's conv2d. With col2im adding vector runs
# (a1d7a1f), col2im beat MAX's conv2d for a 3x3 convolution's two gradients
# on the AMD EPYC Zen 3 (batch 2, in one process: 64 channels at 28x28 3.40
# against 3.85 ms, 128 at 28x28 12.2 against 14.5, 64 at 56x56 11.5 against
# 12.9) and tied at 32 channels at 64x64 (5.31 against 5.16); with the old
# value-by-value col2im, MAX's conv2d had won at 28x28 (AMD EPYC Zen 4).
INPUT_GRAD_MAX_PIXELS = 56 * 56


def _input_grad_by_columns(grad: TensorValue, stride: Sequence[int]) -> bool:
    """Whether an ungrouped 2-d convolution's input gradient is built by
    col2im: strided, or a small output (MAX's conv2d over the spread-out
    gradient does the zeros' work too, and small images with many channels
    slowly)."""
    pixels = static_size(grad.shape[2]) or 0, static_size(grad.shape[3]) or 0
    return tuple(stride) != (1, 1) or pixels[0] * pixels[1] <= INPUT_GRAD_MAX_PIXELS


def _plain_input_grad(
    grad: TensorValue,
    input: TensorValue,
    weight: TensorValue,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> TensorValue:
    size = tuple(size_like(d) for d in input.shape[2:])
    on_cpu = len(size) == 2 and current().device.is_cpu()
    if on_cpu and depthwise_conv.kernels_take(grad, int(input.shape[1]), groups):
        return depthwise_conv.depthwise_input_grad(
            grad, weight, size, stride, padding, dilation
        )
    on_columns = groups == 1 and on_cpu
    if on_columns and _input_grad_by_columns(grad, stride):
        return conv_columns.input_grad(grad, weight, size, stride, padding, dilation)
    return transposed_conv(grad, weight, size, stride, padding, dilation, groups)


def _transposed_input_grad(
    grad: TensorValue,
    input: TensorValue,
    weight: TensorValue,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> TensorValue:
    """The plain convolution of the output gradient, less the rows an
    output padding added beyond what the transposed input reaches."""
    out = forward_conv(grad, weight, stride, padding, dilation, groups)
    for axis in range(2, out.rank):
        extra = int(out.shape[axis]) - int(input.shape[axis])
        out = crop(out, axis, 0, extra)
    return out


@lowering(aten.convolution_backward.default, supports=_covered)
def convolution_backward(
    grad_output: TensorValue,
    input: TensorValue,
    weight: TensorValue,
    bias_sizes: Sequence[int] | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    output_mask: Sequence[bool],
) -> tuple[TensorValue | None, TensorValue | None, TensorValue | None]:
    """convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""
    want_input, want_weight, want_bias = wanted_outputs(output_mask)
    one_d = weight.rank == 3
    if one_d:
        # As in the forward: a 1-d convolution is a 2-d one over a height of 1.
        grad_output, input, weight = (
            ops.unsqueeze(t, 2) for t in (grad_output, input, weight)
        )
        stride, padding, dilation = over_unit_height(stride, padding, dilation)
    spatial = weight.rank - 2
    window = (
        per_axis(stride, spatial, 1),
        per_axis(padding, spatial, 0),
        per_axis(dilation, spatial, 1),
    )
    kernel = [int(d) for d in weight.shape[2:]]
    grad_input = grad_weight = grad_bias = None
    if want_input:
        input_grad = _transposed_input_grad if transposed else _plain_input_grad
        grad_input = input_grad(grad_output, input, weight, *window, groups)
    if want_weight:
        # A transposed convolution's weight reads its input where the
        # plain one's reads its output gradient.
        pair = (input, grad_output) if transposed else (grad_output, input)
        last = not transposed and current().twins.twin(weight) is not None
        grad_weight = _weight_grad(*pair, kernel, *window, groups, last)
    if one_d:
        grad_input, grad_weight = (
            None if g is None else ops.squeeze(g, 2) for g in (grad_input, grad_weight)
        )
    if want_bias:
        axes = [0, *range(2, grad_output.rank)]
        grad_bias = sum_to(grad_output, axes, [grad_output.shape[1]])
    return in_meta_dtypes([grad_input, grad_weight, grad_bias])
