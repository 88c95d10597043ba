"""Normalization layers."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.graph import TensorValue, ops

from ..registry import lowering
from ..scalars import as_tensor

aten = torch.ops.aten


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
    flat = ops.reshape(input, [*lead, -1])
    mean = ops.mean(flat, -1)
    centered = ops.sub(flat, mean)
    variance = ops.mean(ops.mul(centered, centered), -1)
    rstd = ops.rsqrt(ops.add(variance, as_tensor(eps, input.dtype)))
    out = ops.reshape(ops.mul(centered, rstd), list(input.shape))
    if weight is not None:
        out = ops.mul(out, weight)
    if bias is not None:
        out = ops.add(out, bias)
    stat_shape = [*lead] + [1] * k
    return out, ops.reshape(mean, stat_shape), ops.reshape(rstd, stat_shape)
