"""Convolutions by our register-tiled kernel (kernels/mojo_conv) on the CPU.

The kernel reads the channels-last input, padded by the graph, and the
filter as RSCF, and writes the output channels-last: the layouts of MAX's
own conv2d, so the convolution keeps its channels-last twin
(lower/layout.py) for the next layer as the direct strategy does.

Where it is chosen: against MAX's conv2d, by a timing once per machine and
shape (lower/conv_choice.py). On a CPU without AVX-512 it ran ResNet-18's
64- and 128-channel layers 1.4-2.1x faster than MAX 26.7's conv2d (AMD EPYC
Zen 3, docs/benchmarks.md, "Convolutions by our kernel"); on the AVX-512
machines measured before, MAX's conv2d ran those layers at PyTorch's speed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.graph import TensorValue, ops

from ..kernels.tiled_conv import KERNEL as KERNEL
from ..kernels.tiled_conv import tiled_conv
from .context import current
from .kit import arg_tensor, device_of, is_static, node_arg, tensor_meta
from .transposed_conv import pair


def tiled_conv_fits(node: torch.fx.Node) -> str | None:
    """Ungrouped float32 1-d and 2-d convolutions on the CPU with static
    channel, filter and spatial sizes (chosen against MAX's conv2d by a
    timing, or by conv_strategy)."""
    weight, out = arg_tensor(node, 1, "weight"), tensor_meta(node)
    if node_arg(node, 6, "transposed", False) or weight.dim() not in (3, 4):
        return "not a 1-d or 2-d convolution"
    if out is None or device_of(out).type != "cpu":
        return "not on the CPU"
    if out.dtype != torch.float32:
        return f"{out.dtype} (the kernel takes float32)"
    if node_arg(node, 8, "groups", 1) != 1:
        return "grouped"
    if not is_static((*weight.shape, *arg_tensor(node, 0, "input").shape[1:])):
        return "symbolic channel, filter or spatial sizes"
    return None


def rscf_filters(weight: TensorValue) -> TensorValue:
    """A 2-d filter [O, C, kh, kw] as RSCF ([kh, kw, C, O]), the layout of
    our kernel and MAX's conv2d: from its channels-last twin where it has one
    (a channels-last model's filter, lower/conv_pixels.py)."""
    twin = current().twins.twin(weight)
    if twin is not None:
        return ops.permute(twin, [1, 2, 3, 0])
    return ops.permute(weight, [2, 3, 1, 0])


def tiled_conv2d(
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
    (sh, sw), (ph, pw), (dh, dw) = pair(stride, 1), pair(padding, 0), pair(dilation, 1)
    twins = current().twins  # channels-last values kept between ops
    image = twins.channels_last(input)
    if ph or pw:
        image = ops.pad(image, [0, 0, ph, ph, pw, pw, 0, 0])
    filters = rscf_filters(weight)  # W [K, N] of the product
    out = tiled_conv(image, filters, (sh, sw), (dh, dw))
    if bias is not None:
        out = ops.add(out, bias)
    return twins.channels_first(out)
