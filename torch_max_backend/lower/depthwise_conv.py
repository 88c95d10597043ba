"""Depthwise convolutions on the CPU by our kernels (kernels/mojo_depthwise).

A depthwise convolution filters each channel by its own window (groups =
input channels = output channels): MobileNet's and EfficientNet's 3x3 and
5x5 layers, ConvNeXt's 7x7, mamba's short 1-d filter. MAX 26.7's grouped conv2d ran such layers 10-40x
slower than eager PyTorch on the CPU (AMD EPYC Zen 3: a 7x7 layer over
[1, 96, 56, 56] 10.5 ms against 0.5; docs/benchmarks.md, "Depthwise
convolutions"). Our kernels read the channels-last image and write the
output channels-last, kept as its twin (lower/layout.py) for the next
layer, and sum each window in float32 for every float type.

The input gradient is the same window sum read from the other side
(``depthwise_input_grad``); the weight gradient sums each tap's products
over the channels-last images (``depthwise_weight_grad``), a vector of
channels for every stride, where the channels-first kernel it replaces for
one output channel a channel (conv_columns.depthwise_weight_grad, still
used for channel multipliers) reads single values but for stride 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorType, TensorValue, ops

from ..kernels.library import DEPTHWISE, custom
from .context import current
from .kit import arg_tensor, device_of, is_static, node_arg, tensor_meta
from .shapes import SizeLike, conv_out_size, size_like
from .transposed_conv import pair
from .windows import window_parameters

# The float types the kernels sum (in float32) and write.
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_MAX_DTYPES = (DType.float32, DType.bfloat16, DType.float16)


def is_depthwise(weight: torch.Tensor, channels: object, groups: int) -> bool:
    """Whether a convolution of ``channels`` input channels by ``weight``
    [O, C / groups, *kernel] in ``groups`` groups filters each channel by
    its own window (one input and one output channel a group)."""
    return int(weight.shape[1]) == 1 and groups == weight.shape[0] == channels


def kernels_take(grad: TensorValue, channels: int, groups: int) -> bool:
    """Whether the kernels take the backward of a convolution of ``channels``
    input channels in ``groups`` groups whose output's gradient is ``grad``:
    depthwise (a group each input and each output channel), of a float type
    they sum."""
    out_channels = int(grad.shape[1])
    return groups == out_channels == channels and grad.dtype in _MAX_DTYPES


def depthwise_fits(node: torch.fx.Node) -> str | None:
    """Depthwise 1-d and 2-d float convolutions on the CPU with static
    channel and filter sizes (one channel a group, as many out as in)."""
    input, weight = arg_tensor(node, 0, "input"), arg_tensor(node, 1, "weight")
    out = tensor_meta(node)
    if node_arg(node, 6, "transposed", False) or weight.dim() not in (3, 4):
        return "not a 1-d or 2-d convolution"
    if out is None or device_of(out).type != "cpu":
        return "not on the CPU"
    if out.dtype not in KERNEL_DTYPES:
        return f"{out.dtype} (the kernel takes float32, bfloat16 and float16)"
    if input.dim() != weight.dim() or not is_static((input.shape[1], *weight.shape)):
        return "unbatched, or symbolic channel or filter sizes"
    if not is_depthwise(weight, input.shape[1], node_arg(node, 8, "groups", 1)):
        return "not depthwise (one input and one output channel a group)"
    return None


def _taps(weight: TensorValue) -> TensorValue:
    """A depthwise filter [C, 1, kh, kw] as the kernels read it, [kh, kw, C]."""
    channels, _, kh, kw = (int(d) for d in weight.shape)
    flat = ops.reshape(weight, [channels, kh * kw])
    return ops.reshape(ops.transpose(flat, 0, 1), [kh, kw, channels])


def depthwise_conv2d(
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
    window = pair(stride, 1), pair(padding, 0), pair(dilation, 1)
    (sh, sw), (ph, pw), (dh, dw) = window
    channels, _, kh, kw = (int(d) for d in weight.shape)
    device = current().device
    twins = current().twins  # channels-last values kept between ops
    image = twins.channels_last(input)
    n, height, width, _ = image.shape
    out_h = conv_out_size(size_like(height), kh, sh, ph, dh)
    out_w = conv_out_size(size_like(width), kw, sw, pw, dw)
    if bias is None:
        zeros = ops.constant(np.zeros(channels, np.float32), DType.float32, device)
        bias = ops.cast(zeros, input.dtype)
    (out,) = custom(
        DEPTHWISE,
        "torch_max_backend_depthwise_conv",
        [image, _taps(weight), bias],
        [TensorType(input.dtype, [n, out_h, out_w, channels], device)],
        device,
        parameters=window_parameters((kh, kw), *window),
    )
    return twins.channels_first(out)


def depthwise_input_grad(
    grad: TensorValue,
    weight: TensorValue,
    size: Sequence[SizeLike],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> TensorValue:
    """The input gradient [N, C, *size] of a depthwise 2-d convolution whose
    output's gradient is ``grad``, with its channels-last twin."""
    channels, _, kh, kw = (int(d) for d in weight.shape)
    device = current().device
    twins = current().twins
    g = twins.channels_last(grad)
    (out,) = custom(
        DEPTHWISE,
        "torch_max_backend_depthwise_input_grad",
        [g, _taps(weight)],
        [TensorType(grad.dtype, [g.shape[0], *size, channels], device)],
        device,
        parameters=window_parameters((kh, kw), stride, padding, dilation),
    )
    return twins.channels_first(out)


def depthwise_weight_grad(
    grad: TensorValue,
    input: TensorValue,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> TensorValue:
    """The weight gradient [C, 1, kh, kw] of a depthwise 2-d convolution of
    ``input`` whose output's gradient is ``grad``, summed over the
    channels-last images a vector of channels at a time."""
    kh, kw = kernel
    device = current().device
    twins = current().twins
    g = twins.channels_last(grad)
    channels = int(g.shape[3])
    (taps,) = custom(
        DEPTHWISE,
        "torch_max_backend_depthwise_weight_grad_last",
        [g, twins.channels_last(input)],
        [TensorType(grad.dtype, [kh, kw, channels], device)],
        device,
        parameters=window_parameters((kh, kw), stride, padding, dilation),
    )
    flat = ops.transpose(ops.reshape(taps, [kh * kw, channels]), 0, 1)
    return ops.reshape(flat, [channels, 1, kh, kw])
