"""Convolutions: PyTorch's NC(D)HW / OI(D)HW layouts onto MAX's conv2d and conv3d."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import torch
from max.graph import Dim, TensorValue, ops

from ..context import current
from ..conv_choice import choose_conv
from ..conv_columns import windows
from ..conv_kernel import rscf_filters, tiled_conv2d, tiled_conv_fits
from ..conv_pixels import conv2d_by_pixels
from ..depthwise_conv import depthwise_conv2d, depthwise_fits
from ..kit import arg_tensor, device_of, is_static, node_arg, size_hint, tensor_meta
from ..opmath import accumulated
from ..products import product
from ..registry import Strategy, lowering_strategies
from ..shapes import SizeLike, conv_out_size, size_like, static_size
from ..transposed_conv import (
    channels_last_conv,
    over_unit_height,
    pair,
    per_axis,
    transposed_conv,
)

aten = torch.ops.aten


def _covered(node: torch.fx.Node) -> str | None:
    """1-d, 2-d and 3-d convolutions, plain and transposed; transposed ones with static channel and spatial sizes."""
    transposed = node_arg(node, 6, "transposed", False)
    input, weight = arg_tensor(node, 0, "input"), arg_tensor(node, 1, "weight")
    spatial = weight.dim() - 2
    if spatial not in (1, 2, 3):
        return f"{spatial}-d convolution (1-d, 2-d and 3-d are supported)"
    # The zero-spreading and cropping are sliced by static sizes.
    if transposed and not is_static((*input.shape[1:], *weight.shape)):
        return "transposed convolution with symbolic channel or spatial sizes"
    return None


def _add_bias(out: TensorValue, bias: TensorValue | None) -> TensorValue:
    if bias is None:
        return out
    return ops.add(out, ops.reshape(bias, [1, -1] + [1] * (out.rank - 2)))


def _transposed(
    input: TensorValue,
    weight: TensorValue,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    output_padding: Sequence[int],
    groups: int,
) -> TensorValue:
    size = [
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
    ]
    return transposed_conv(input, weight, size, stride, padding, dilation, groups)


# Where MAX's direct conv2d kernel loses to a matmul (MAX 26.7, CPU, fp32,
# ResNet-18's layers at 224x224, median ms of one layer, direct with the filter
# permuted to RSCF in the graph / im2col (Mojo kernel) and matmul / PyTorch):
#   64->64 3x3 at 56x56:          1.03 / 1.91 / 1.02
#   128->128 3x3 at 28x28:        1.11 / 1.35 / 0.93
#   256->256 3x3 at 14x14:        3.62 / 1.34 / 1.04
#   512->512 3x3 at 7x7:         15.71 / 1.91 / 1.62
#   256->512 3x3 stride 2 to 7x7: 5.30 / 0.99 / 0.85
# The direct kernel slows down as the feature map shrinks and the channels
# grow, and permuting a large filter is itself slow (a 2.4M-element filter:
# 7.5 ms). The matmul reads the filter as torch lays it out.
_MATMUL_MAX_PIXELS = 16 * 16
_MATMUL_MIN_FILTER = 1 << 20


def _conv2d_as_matmul(
    input: TensorValue,
    weight: TensorValue,
    bias: TensorValue | None,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> TensorValue:
    """An ungrouped 2-d convolution in NCHW: the input's windows (im2col, a
    shipped Mojo kernel) times the filter as a [O, C * kh * kw] matrix, which is
    torch's OIHW layout as it is: the filter is not permuted."""
    out_channels, channels, kh, kw = (int(d) for d in weight.shape)
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    out_h = conv_out_size(size_like(input.shape[2]), kh, sh, ph, dh)
    out_w = conv_out_size(size_like(input.shape[3]), kw, sw, pw, dw)
    ctx = current()
    filters = ctx.twins.twin(weight)
    if filters is not None and isinstance(out_h, int) and isinstance(out_w, int):
        # A channels-last filter, read as it is stored.
        return conv2d_by_pixels(
            input, filters, bias, (out_h, out_w), stride, padding, dilation
        )
    # A channels-last twin is read as it is, instead of permuted back.
    twin = ctx.twins.twin(input)
    n = input.shape[0]
    rows = channels * kh * kw
    matrix = ops.reshape(weight, [out_channels, rows])
    image = twin if twin is not None else input
    window = ((kh, kw), stride, padding, dilation)
    if all(isinstance(s, int) for s in (out_h, out_w, static_size(n))):
        # Every image's windows side by side: one product whose columns are
        # all the batch's pixels (a small image's alone are too few for a
        # fast product: ResNet-18's 4x4 layers took twice eager's time so).
        cols = windows(
            image,
            [out_h, out_w],
            *window,
            channels_last=twin is not None,
            batch_inner=True,
        )
        pixels = ops.reshape(cols, [rows, n * out_h * out_w])
        filtered = accumulated(product, matrix, pixels)
        out = ops.reshape(filtered, [out_channels, n, out_h, out_w])
        if bias is not None:
            out = ops.add(out, ops.reshape(bias, [-1, 1, 1, 1]))
        # C, N, H, W as the product lays it out: a batch norm's statistics
        # over N, H, W then read each channel's row once (lower/reduced_axes.py).
        return ctx.twins.permuted(out, [1, 0, 2, 3])
    cols = windows(image, [out_h, out_w], *window, channels_last=twin is not None)
    # With symbolic sizes, MAX cannot prove that splitting the matmul's
    # out_h * out_w axis back into (out_h, out_w) is sound (it expands the
    # product of the two expressions), so the output size is named by two
    # fresh symbols, bound at run time, for the matmul and the split, then
    # restated as the expressions the rest of the graph knows.
    size: list[SizeLike] = [out_h, out_w]
    symbolic = not all(isinstance(s, int) for s in size)
    if symbolic:
        name = ctx.node.name
        size = [Dim(f"{name}_out_h"), Dim(f"{name}_out_w")]
        cols = ops.rebind(cols, [n, rows, *size])
    pixels = ops.reshape(cols, [n, rows, size[0] * size[1]])
    filtered = accumulated(product, ops.unsqueeze(matrix, 0), pixels)
    out = ops.reshape(filtered, [n, out_channels, *size])
    if symbolic:
        out = ops.rebind(out, [n, out_channels, out_h, out_w])
    return _add_bias(out, bias)


# -- strategies, in priority order ------------------------------------------------


def _weight(node: torch.fx.Node) -> torch.Tensor:
    return arg_tensor(node, 1, "weight")


def _transposed_node(node: torch.fx.Node) -> bool:
    return bool(node_arg(node, 6, "transposed", False))


def is_transposed(node: torch.fx.Node) -> str | None:
    """Transposed convolutions."""
    return None if _transposed_node(node) else "not transposed"


def is_volumetric(node: torch.fx.Node) -> str | None:
    """3-d convolutions."""
    if _weight(node).dim() == 5 and not _transposed_node(node):
        return None
    return "not a 3-d convolution"


def matmul_pays(node: torch.fx.Node) -> str | None:
    """Ungrouped 1-d and 2-d convolutions on the CPU whose filter has 2^20
    elements or more, or whose output has at most 16x16 pixels (as traced)."""
    weight, out = _weight(node), tensor_meta(node)
    if _transposed_node(node) or weight.dim() == 5:
        return "not a 1-d or 2-d convolution"
    if out is None or device_of(out).type != "cpu":
        return "not on the CPU (GPUs keep MAX's conv kernel)"
    if node_arg(node, 8, "groups", 1) != 1:
        return "grouped"
    if not is_static(weight.shape):
        return "symbolic filter sizes"
    if math.prod(weight.shape) >= _MATMUL_MIN_FILTER:
        return None
    hints = [size_hint(s) for s in out.shape[2:]]
    if None not in hints and math.prod(hints) <= _MATMUL_MAX_PIXELS:
        return None
    return "output over 16x16 pixels with a filter under 2^20 elements"


def _over_unit_height(lower: Callable[..., TensorValue]) -> Callable[..., TensorValue]:
    """A 2-d strategy that also takes 1-d convolutions, as 2-d ones over a
    height of 1."""

    @functools.wraps(lower)
    def wrapped(
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
        one_d = weight.rank == 3
        if one_d:
            input, weight = ops.unsqueeze(input, 2), ops.unsqueeze(weight, 2)
            stride, padding, dilation = over_unit_height(stride, padding, dilation)
            output_padding = [0, *output_padding]
        out = lower(
            input,
            weight,
            bias,
            stride,
            padding,
            dilation,
            transposed,
            output_padding,
            groups,
        )
        return ops.squeeze(out, 2) if one_d else out

    return wrapped


def transposed_convolution(
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
    spatial = weight.rank - 2
    out = _transposed(
        input,
        weight,
        per_axis(stride, spatial, 1),
        per_axis(padding, spatial, 0),
        per_axis(dilation, spatial, 1),
        per_axis(output_padding, spatial, 0),
        groups,
    )
    return _add_bias(out, bias)


def conv3d(
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
    d = per_axis(padding, 3, 0)
    # NDHWC input and QRSCF filter, MAX's layouts for conv3d.
    twins = current().twins  # channels-last values kept between ops
    out = channels_last_conv(
        twins.channels_last(input),
        ops.permute(weight, [2, 3, 4, 1, 0]),
        per_axis(stride, 3, 1),
        per_axis(dilation, 3, 1),
        (d[0], d[0], d[1], d[1], d[2], d[2]),
        groups,
        bias,
    )
    return twins.channels_first(out)


def im2col_matmul(
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
    return _conv2d_as_matmul(
        input, weight, bias, pair(stride, 1), pair(padding, 0), pair(dilation, 1)
    )


def direct_conv2d(
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
    pad_h, pad_w = pair(padding, 0)
    # NHWC input and RSCF filter: the layouts MAX's conv2d handles on every device.
    twins = current().twins  # channels-last values kept between ops
    out = channels_last_conv(
        twins.channels_last(input),
        rscf_filters(weight),
        pair(stride, 1),
        pair(dilation, 1),
        (pad_h, pad_h, pad_w, pad_w),
        groups,
        bias,
    )
    return twins.channels_first(out)


convolution = lowering_strategies(
    aten.convolution.default,
    supports=_covered,
    candidates=[
        Strategy(
            "transposed", _over_unit_height(transposed_convolution), is_transposed
        ),
        Strategy("conv3d", conv3d, is_volumetric),
        Strategy("depthwise", _over_unit_height(depthwise_conv2d), depthwise_fits),
        Strategy("im2col_matmul", _over_unit_height(im2col_matmul), matmul_pays),
        Strategy("tiled", _over_unit_height(tiled_conv2d), tiled_conv_fits),
        Strategy(
            "direct", _over_unit_height(direct_conv2d)
        ),  # MAX's conv2d kernel: the rest
    ],
    # Our kernel or MAX's conv2d, where both fit: timed per machine and shape.
    choose=choose_conv,
)
