"""Backward ops of convolution and the layer/group normalizations.

AOTAutograd leaves these in backward graphs once they are no longer
decomposed. Each returns its gradients as a tuple and computes only those
asked for by ``output_mask`` (torch's meta then says None for the others).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.dtype import DType
from max.graph import Dim, TensorValue, ops

from ...dtypes import accumulation_dtype
from .. import conv_columns, norm_kernels
from ..context import current
from ..float32_products import matmul
from ..kit import arg_tensor, is_static, node_arg
from ..opmath import accumulated
from ..output_meta import in_meta_dtypes, wanted_outputs
from ..reduced_axes import reduce_axes
from ..registry import lowering
from ..shapes import static_size
from ..transposed_conv import over_unit_height, pair, transposed_conv2d

aten = torch.ops.aten


def _sum_to(
    x: TensorValue, axes: Sequence[int], shape: Sequence[int | Dim]
) -> TensorValue:
    """``x`` summed over ``axes`` (inner runs merged: ops/reduction.py), then reshaped."""
    return ops.reshape(reduce_axes(x, axes, True, ops.sum), list(shape))


# -- convolution ---------------------------------------------------------------


def _conv_backward_covered(node: torch.fx.Node) -> str | None:
    """1-d and 2-d, non-transposed convolutions with static channel, kernel and spatial sizes."""
    transposed = node_arg(node, 7, "transposed", False)
    if transposed:
        return "transposed convolution"
    grad, input, weight = (arg_tensor(node, i) for i in range(3))
    if weight.dim() not in (3, 4):
        return f"{weight.dim() - 2}-d convolution (1-d and 2-d are supported)"
    # The batch may be symbolic; channels, kernel and spatial sizes decide
    # the slicing of the lowering.
    if not (
        is_static(input.shape[1:])
        and is_static(grad.shape[1:])
        and is_static(weight.shape)
    ):
        return "convolution backward with symbolic channel or spatial sizes"
    return None


def _grouped_windows(
    input: TensorValue,
    out_size: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> TensorValue:
    """The input's sliding windows, [N, C * kh * kw, out_h, out_w]: our
    im2col kernel on the CPU, kh * kw strided slices of the padded input
    and a stack elsewhere (the same order: torch's (c, kh, kw) per channel)."""
    if current().device.is_cpu():
        return conv_columns.windows(
            input, list(out_size), kernel, stride, padding, dilation
        )
    (out_h, out_w), (kh, kw) = out_size, kernel
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    x = ops.pad(input, [0, 0, 0, 0, ph, ph, pw, pw]) if ph or pw else input
    windows = []
    for i in range(kh):
        for j in range(kw):
            top, left = i * dh, j * dw
            windows.append(
                x[
                    :,
                    :,
                    top : top + (out_h - 1) * sh + 1 : sh,
                    left : left + (out_w - 1) * sw + 1 : sw,
                ]
            )
    cols = ops.stack(windows, axis=2)
    return ops.reshape(cols, [input.shape[0], -1, out_h, out_w])


def _conv_weight_grad(
    grad: TensorValue,
    input: TensorValue,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
) -> TensorValue:
    """A grouped convolution's weight gradient: one batched matmul per group,
    the grad times the input's sliding windows. A depthwise one (one input
    channel per group) on the CPU is summed by one kernel instead."""
    channels = int(input.shape[1])
    out_channels = int(grad.shape[1])
    c_group = channels // groups
    o_group = out_channels // groups
    if c_group == 1 and current().device.is_cpu():

        def summed(g: TensorValue, x: TensorValue) -> TensorValue:
            return conv_columns.depthwise_weight_grad(
                g, x, kernel, stride, padding, dilation
            )

        return accumulated(summed, grad, input)
    out_h, out_w = int(grad.shape[2]), int(grad.shape[3])
    kh, kw = kernel
    cols = _grouped_windows(input, (out_h, out_w), kernel, stride, padding, dilation)
    # Explicit (possibly symbolic) sizes, not -1: MAX must see that both
    # matmul operands share the contracted batch * blocks dim.
    n = grad.shape[0]
    blocks = out_h * out_w
    cols = ops.reshape(cols, [n, groups, c_group * kh * kw, blocks])
    cols = ops.reshape(
        ops.permute(cols, [1, 0, 3, 2]), [groups, n * blocks, c_group * kh * kw]
    )
    g = ops.reshape(grad, [n, groups, o_group, blocks])
    g = ops.reshape(ops.permute(g, [1, 2, 0, 3]), [groups, o_group, n * blocks])
    # [groups, O / groups, C / groups * kh * kw]
    weight_grad = accumulated(matmul, g, cols)
    return ops.reshape(weight_grad, [out_channels, c_group, kh, kw])


# The most output pixels of a stride-1 convolution whose input gradient is
# built by col2im; past it MAX's conv2d. With col2im adding vector runs
# (a1d7a1f), col2im beat MAX's conv2d for a 3x3 convolution's two gradients
# on the AMD EPYC Zen 3 (batch 2, in one process: 64 channels at 28x28 3.40
# against 3.85 ms, 128 at 28x28 12.2 against 14.5, 64 at 56x56 11.5 against
# 12.9) and tied at 32 channels at 64x64 (5.31 against 5.16); with the old
# value-by-value col2im, MAX's conv2d had won at 28x28 (AMD EPYC Zen 4).
INPUT_GRAD_MAX_PIXELS = 56 * 56


def _input_grad_by_columns(grad: TensorValue, stride: tuple[int, int]) -> bool:
    """Whether an ungrouped convolution's input gradient is built by col2im:
    strided, or a small output (MAX's conv2d over the spread-out gradient
    does the zeros' work too, and small images with many channels slowly)."""
    pixels = static_size(grad.shape[2]) or 0, static_size(grad.shape[3]) or 0
    return stride != (1, 1) or pixels[0] * pixels[1] <= INPUT_GRAD_MAX_PIXELS


@lowering(aten.convolution_backward.default, supports=_conv_backward_covered)
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
    stride2, padding2, dilation2 = (
        pair(stride, 1),
        pair(padding, 0),
        pair(dilation, 1),
    )
    grad_input = grad_weight = grad_bias = None
    # On the CPU an ungrouped convolution's gradients are products with its
    # windows' matrix (conv_columns.py); MAX's conv2d and strided slices
    # elsewhere, and for the input's gradient where MAX's conv2d is as fast.
    by_columns = groups == 1 and current().device.is_cpu()
    if want_input:
        size = (int(input.shape[2]), int(input.shape[3]))
        if by_columns and _input_grad_by_columns(grad_output, stride2):
            grad_input = conv_columns.input_grad(
                grad_output, weight, size, stride2, padding2, dilation2
            )
        else:
            grad_input = transposed_conv2d(
                grad_output, weight, size, stride2, padding2, dilation2, groups
            )
        if one_d:
            grad_input = ops.squeeze(grad_input, 2)
    if want_weight:
        kernel = (int(weight.shape[2]), int(weight.shape[3]))
        if by_columns:
            grad_weight = conv_columns.weight_grad(
                grad_output, input, kernel, stride2, padding2, dilation2
            )
        else:
            grad_weight = _conv_weight_grad(
                grad_output, input, kernel, stride2, padding2, dilation2, groups
            )
        if one_d:
            grad_weight = ops.squeeze(grad_weight, 2)
    if want_bias:
        grad_bias = _sum_to(grad_output, [0, 2, 3], [grad_output.shape[1]])
    return in_meta_dtypes([grad_input, grad_weight, grad_bias])


# -- normalization ---------------------------------------------------------------


def _norm_input_grad(
    g: TensorValue, normalized: TensorValue, rstd: TensorValue
) -> TensorValue:
    """d(input) of a normalization over the last axis, given g = dy * gamma.

    rstd * (g - mean(g) - x_hat * mean(g * x_hat)), means over the last axis.
    """
    mean_g = ops.mean(g, -1)
    mean_gx = ops.mean(ops.mul(g, normalized), -1)
    return ops.mul(rstd, ops.sub(ops.sub(g, mean_g), ops.mul(normalized, mean_gx)))


@lowering(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(
    grad_out: TensorValue,
    input: TensorValue,
    normalized_shape: Sequence[int | Dim],
    mean: TensorValue,
    rstd: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
    output_mask: Sequence[bool],
) -> tuple[TensorValue | None, TensorValue | None, TensorValue | None]:
    """native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""
    want_input, want_weight, want_bias = wanted_outputs(output_mask)
    dtype = accumulation_dtype(input.dtype)
    lead = list(input.shape)[: input.rank - len(normalized_shape)]
    # The kernel works in float32: float64 keeps its own precision, composed.
    by_kernel = dtype == DType.float32 and is_static(normalized_shape)
    if by_kernel and current().device.is_cpu():
        grads = norm_kernels.layer_norm_grads(
            grad_out, input, normalized_shape, mean, rstd, weight
        )
        wanted = (want_input, want_weight, want_bias)
        return in_meta_dtypes(
            [g if w else None for g, w in zip(grads, wanted, strict=True)]
        )
    # The normalized dims as one flattened last axis, statistics as [*lead, 1].
    x = ops.cast(ops.reshape(input, [*lead, -1]), dtype)
    dy = ops.cast(ops.reshape(grad_out, [*lead, -1]), dtype)
    mean = ops.cast(ops.reshape(mean, [*lead, 1]), dtype)
    rstd = ops.cast(ops.reshape(rstd, [*lead, 1]), dtype)
    normalized = ops.mul(ops.sub(x, mean), rstd)
    grad_input = grad_weight = grad_bias = None
    if want_input:
        g = dy
        if weight is not None:
            g = ops.mul(dy, ops.cast(ops.reshape(weight, [-1]), dtype))
        grad_input = ops.reshape(
            _norm_input_grad(g, normalized, rstd), list(input.shape)
        )
    # Parameter grads: summed over every leading (batch) position.
    if want_weight:
        per_row = ops.reshape(ops.mul(dy, normalized), [-1, dy.shape[-1]])
        grad_weight = _sum_to(per_row, [0], list(normalized_shape))
    if want_bias:
        per_row = ops.reshape(dy, [-1, dy.shape[-1]])
        grad_bias = _sum_to(per_row, [0], list(normalized_shape))
    return in_meta_dtypes([grad_input, grad_weight, grad_bias])


def _static_channels(node: torch.fx.Node) -> str | None:
    """A channel count known at compile time."""
    # The channels split into groups by a reshape, which MAX cannot do for
    # a symbolic count (it would need C / group).
    if not isinstance(arg_tensor(node, 1).shape[1], int):
        return "group norm backward with a symbolic channel count"
    return None


@lowering(aten.native_group_norm_backward.default, supports=_static_channels)
def native_group_norm_backward(
    grad_out: TensorValue,
    input: TensorValue,
    mean: TensorValue,
    rstd: TensorValue,
    weight: TensorValue | None,
    N: int | Dim,
    C: int | Dim,
    HxW: int | Dim,
    group: int,
    output_mask: Sequence[bool],
) -> tuple[TensorValue | None, TensorValue | None, TensorValue | None]:
    """native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""
    want_input, want_weight, want_bias = wanted_outputs(output_mask)
    dtype = accumulation_dtype(input.dtype)
    # [N, group, C / group, HxW]: statistics per (n, group), parameters per channel.
    grouped = [N, group, -1, HxW]
    x = ops.cast(ops.reshape(input, grouped), dtype)
    dy = ops.cast(ops.reshape(grad_out, grouped), dtype)
    mean = ops.cast(ops.reshape(mean, [N, group, 1, 1]), dtype)
    rstd = ops.cast(ops.reshape(rstd, [N, group, 1, 1]), dtype)
    normalized = ops.mul(ops.sub(x, mean), rstd)
    grad_input = grad_weight = grad_bias = None
    if want_input:
        g = dy
        if weight is not None:
            gamma = ops.cast(ops.reshape(weight, [1, group, -1, 1]), dtype)
            g = ops.mul(dy, gamma)
        # One flattened axis per group for the means.
        flat = [N, group, -1]
        grad = _norm_input_grad(
            ops.reshape(g, flat),
            ops.reshape(normalized, flat),
            ops.reshape(rstd, [N, group, 1]),
        )
        grad_input = ops.reshape(grad, list(input.shape))
    if want_weight:
        grad_weight = _sum_to(ops.mul(dy, normalized), [0, 3], [C])
    if want_bias:
        grad_bias = _sum_to(dy, [0, 3], [C])
    return in_meta_dtypes([grad_input, grad_weight, grad_bias])
