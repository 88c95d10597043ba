"""Normalization layers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from max.graph import Dim, TensorValue, ops

from ..registry import lowering
from ..scalars import as_tensor

aten = torch.ops.aten


def _normalize_last(
    x: TensorValue, eps: float
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """(x - mean) * rstd over the last axis, with mean and rstd (kept dims)."""
    mean = ops.mean(x, -1)
    centered = ops.sub(x, mean)
    variance = ops.mean(ops.mul(centered, centered), -1)
    rstd = ops.rsqrt(ops.add(variance, as_tensor(eps, x.dtype)))
    return ops.mul(centered, rstd), mean, rstd


@lowering(aten.native_layer_norm.default)
def native_layer_norm(
    input: TensorValue,
    normalized_shape: Sequence[int],
    weight: TensorValue | None,
    bias: TensorValue | None,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)"""
    k = len(normalized_shape)
    lead = list(input.shape)[: input.rank - k]
    # Normalize over the last k dims as one flattened dim.
    normalized, mean, rstd = _normalize_last(ops.reshape(input, [*lead, -1]), eps)
    out = ops.reshape(normalized, list(input.shape))
    if weight is not None:
        out = ops.mul(out, weight)
    if bias is not None:
        out = ops.add(out, bias)
    stat_shape = [*lead] + [1] * k
    return out, ops.reshape(mean, stat_shape), ops.reshape(rstd, stat_shape)


def _channel_view(x: TensorValue, rank: int) -> TensorValue:
    """A per-channel [C] vector shaped to broadcast over N, C, *spatial."""
    return ops.reshape(x, [1, -1] + [1] * (rank - 2))


@lowering(aten._native_batch_norm_legit_no_training.default)
def batch_norm_inference(
    input: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
    running_mean: TensorValue,
    running_var: TensorValue,
    momentum: float,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    rank = input.rank
    scale = ops.rsqrt(ops.add(running_var, as_tensor(eps, running_var.dtype)))
    if weight is not None:
        scale = ops.mul(scale, weight)
    shift = ops.negate(ops.mul(running_mean, scale))
    if bias is not None:
        shift = ops.add(shift, bias)
    out = ops.add(
        ops.mul(input, _channel_view(scale, rank)), _channel_view(shift, rank)
    )
    # In inference torch returns empty saved statistics.
    empty = ops.constant(np.zeros((0,), np.float32), input.dtype, device=input.device)
    return out, empty, empty


@lowering(aten.native_group_norm.default)
def native_group_norm(
    input: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
    N: int | Dim,
    C: int | Dim,
    HxW: int | Dim,
    group: int,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)"""
    normalized, mean, rstd = _normalize_last(ops.reshape(input, [N, group, -1]), eps)
    out = ops.reshape(normalized, list(input.shape))
    if weight is not None:
        out = ops.mul(out, _channel_view(weight, input.rank))
    if bias is not None:
        out = ops.add(out, _channel_view(bias, input.rank))
    return out, ops.reshape(mean, [N, group]), ops.reshape(rstd, [N, group])
