"""Backward ops of the layer and group normalizations.

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
from .. import norm_kernels
from ..context import current
from ..kit import arg_tensor, is_static
from ..output_meta import in_meta_dtypes, wanted_outputs
from ..reduced_axes import sum_to
from ..registry import lowering

aten = torch.ops.aten


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
        grad_weight = sum_to(per_row, [0], list(normalized_shape))
    if want_bias:
        per_row = ops.reshape(dy, [-1, dy.shape[-1]])
        grad_bias = sum_to(per_row, [0], list(normalized_shape))
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
        grad_weight = sum_to(ops.mul(dy, normalized), [0, 3], [C])
    if want_bias:
        grad_bias = sum_to(dy, [0, 3], [C])
    return in_meta_dtypes([grad_input, grad_weight, grad_bias])
