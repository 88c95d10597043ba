"""Convolutions by our register-tiled kernel (kernels/mojo_conv) on the CPU.

The kernel reads the channels-last input, padded by the graph, and the
filter as RSCF, and writes the output channels-last: the layouts of MAX's
own conv2d, so the convolution keeps its channels-last twin
(lower/layout.py) for the next layer as the direct strategy does.

Where it is chosen: on a CPU without AVX-512 it ran ResNet-18's 64- and
128-channel layers 1.4-2.1x faster than MAX 26.7's conv2d (AMD EPYC Zen 3,
docs/benchmarks.md, "Convolutions by our kernel"). On the AVX-512 machines
measured before, MAX's conv2d ran those layers at PyTorch's speed, and this
kernel is not yet timed there, so they keep MAX's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.graph import TensorType, TensorValue, ops

from ..kernels.library import CONV, custom
from ..storage.bundle import host_cpu
from .context import current
from .kit import arg_tensor, is_static, node_arg, tensor_meta
from .shapes import conv_out_size
from .transposed_conv import pair

KERNEL = "torch_max_backend_tiled_conv2d"


def cpu_has_avx512() -> bool:
    """Whether this machine's CPU has AVX-512 (False where its flags cannot
    be read)."""
    return "avx512f" in host_cpu()[1]


def tiled_conv_fits(node: torch.fx.Node) -> str | None:
    """Ungrouped float32 1-d and 2-d convolutions on a CPU without AVX-512,
    with static channel, filter and spatial sizes."""
    weight, out = arg_tensor(node, 1, "weight"), tensor_meta(node)
    if node_arg(node, 6, "transposed", False) or weight.dim() not in (3, 4):
        return "not a 1-d or 2-d convolution"
    if out is None or out.device.type != "cpu":
        return "not on the CPU"
    if out.dtype != torch.float32:
        return f"{out.dtype} (the kernel takes float32)"
    if node_arg(node, 8, "groups", 1) != 1:
        return "grouped"
    if not is_static((*weight.shape, *arg_tensor(node, 0, "input").shape[1:])):
        return "symbolic channel, filter or spatial sizes"
    if cpu_has_avx512():
        return "a CPU with AVX-512 (MAX's conv2d is as fast as PyTorch's there)"
    return None


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
    out_channels, _, kh, kw = (int(d) for d in weight.shape)
    twins = current().twins  # channels-last values kept between ops
    image = twins.channels_last(input)
    if ph or pw:
        image = ops.pad(image, [0, 0, ph, ph, pw, pw, 0, 0])
    out_h = conv_out_size(int(input.shape[2]), kh, sh, ph, dh)
    out_w = conv_out_size(int(input.shape[3]), kw, sw, pw, dw)
    filters = ops.permute(weight, [2, 3, 1, 0])  # RSCF: W [K, N] of the product
    shape = [image.shape[0], out_h, out_w, out_channels]
    (out,) = custom(
        CONV,
        KERNEL,
        [image, filters],
        [TensorType(image.dtype, shape, image.device)],
        image.device,
        {"stride_h": sh, "stride_w": sw, "dilation_h": dh, "dilation_w": dw},
    )
    if bias is not None:
        out = ops.add(out, bias)
    return twins.channels_first(out)
