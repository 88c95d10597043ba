"""A training batch norm: its forward with running statistics, and its backward.

AOTAutograd leaves ``_native_batch_norm_legit_functional`` (the forward,
functionalized: it returns the updated running statistics) and
``native_batch_norm_backward`` in a training step's graphs once they are
lowered rather than decomposed. On the CPU each is one kernel of ours
(kernels/mojo/batch_norm.mojo) where torch's decompositions cost two to four
MAX reductions each, every one a kernel of its own to compile; on other
devices they are composed from MAX ops as those decompositions write them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorType, TensorValue, ops

from ...dtypes import accumulation_dtype
from ...kernels.library import SHIPPED, custom
from ..context import current
from ..output_meta import in_meta_dtypes, wanted_outputs
from ..per_channel import channel_view, normalized_channels
from ..reduced_axes import reduce_axes
from ..registry import lowering
from ..scalars import as_tensor

aten = torch.ops.aten
F32 = DType.float32


def _channel_runs(x: TensorValue, last: bool) -> TensorValue:
    """``x`` as the kernels read it, [A, C, B]: its channels-last twin as
    [N * spatial, C, 1] rows where ``last``, else [N, C, spatial]."""
    channels = x.shape[1]
    if last:
        return ops.reshape(current().twins.channels_last(x), [-1, channels, 1])
    return ops.reshape(x, [x.shape[0], channels, -1])


def _read_runs(x: TensorValue) -> TensorValue:
    """``x`` as [A, C, B] in the layout it was built in: its channels-last
    twin as rows, a convolution's [C, N, *spatial] product as [1, C, N *
    spatial], else as it is (a permute read by a kernel is first copied)."""
    twins = current().twins
    if twins.twin(x) is not None:
        return _channel_runs(x, True)
    source = twins.source(x)
    if source is not None and source[1] == [1, 0, *range(2, x.rank)]:
        return ops.reshape(source[0], [1, x.shape[1], -1])
    return _channel_runs(x, False)


def _from_runs(runs: TensorValue, like: TensorValue, last: bool) -> TensorValue:
    """A kernel's [A, C, B] result as a value shaped as ``like``."""
    if not last:
        return ops.reshape(runs, list(like.shape))
    twins = current().twins
    shape = list(twins.channels_last(like).shape)
    return twins.channels_first(ops.reshape(runs, shape))


def _kernels_serve(dtype: DType) -> bool:
    """Our kernels work in float32 on the CPU; float64 and GPUs compose."""
    return dtype == F32 and current().device.is_cpu()


def _composed_statistics(
    x: TensorValue, eps: float
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """Mean, rstd and unbiased variance per channel from MAX ops, in ``x``'s dtype."""
    axes = [0, *range(2, x.rank)]
    mean = reduce_axes(x, axes, False, ops.mean)
    centered = ops.sub(x, channel_view(mean, x.rank))
    variance = reduce_axes(ops.mul(centered, centered), axes, False, ops.mean)
    rstd = ops.rsqrt(ops.add(variance, as_tensor(eps, x.dtype)))
    n = int(np.prod([int(x.shape[a]) for a in axes]))
    unbiased = ops.mul(variance, as_tensor(n / max(n - 1, 1), x.dtype))
    return mean, rstd, unbiased


def _statistics(
    x: TensorValue,
    running_mean: TensorValue,
    running_var: TensorValue,
    momentum: float,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue, TensorValue]:
    """Mean, rstd, and the running statistics updated, in the accumulation dtype."""
    dtype = accumulation_dtype(x.dtype)
    rm, rv = ops.cast(running_mean, dtype), ops.cast(running_var, dtype)
    if _kernels_serve(dtype):
        device = current().device
        coefficients = ops.constant(
            np.array([eps, momentum], np.float32), F32, device=device
        )
        vector = TensorType(F32, [x.shape[1]], device)
        mean, rstd, new_rm, new_rv = custom(
            SHIPPED,
            "torch_max_backend_batch_norm_stats",
            [ops.cast(_read_runs(x), F32), rm, rv, coefficients],
            [vector] * 4,
            device,
        )
        return mean, rstd, new_rm, new_rv
    mean, rstd, unbiased = _composed_statistics(ops.cast(x, dtype), eps)
    keep = as_tensor(1 - momentum, dtype)
    step = as_tensor(momentum, dtype)
    new_rm = ops.add(ops.mul(mean, step), ops.mul(rm, keep))
    new_rv = ops.add(ops.mul(unbiased, step), ops.mul(rv, keep))
    return mean, rstd, new_rm, new_rv


@lowering(aten._native_batch_norm_legit_functional.default)
def batch_norm_functional(
    input: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
    running_mean: TensorValue,
    running_var: TensorValue,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[TensorValue | None, ...]:
    """_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)"""
    if not training:
        # The running statistics normalize and stay as they are; torch
        # returns empty saved statistics.
        dtype = accumulation_dtype(input.dtype)
        rstd = ops.rsqrt(ops.add(ops.cast(running_var, dtype), as_tensor(eps, dtype)))
        out = normalized_channels(input, running_mean, rstd, weight, bias)
        empty = ops.constant(np.zeros((0,), np.float32), F32, device=input.device)
        return in_meta_dtypes([out, empty, empty, running_mean, running_var])
    mean, rstd, new_rm, new_rv = _statistics(
        input, running_mean, running_var, momentum, eps
    )
    out = normalized_channels(input, mean, rstd, weight, bias)
    return in_meta_dtypes([out, mean, rstd, new_rm, new_rv])


def _composed_backward(
    grad: TensorValue,
    x: TensorValue,
    weight: TensorValue,
    mean: TensorValue,
    rstd: TensorValue,
    train: bool,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """torch's decomposition of native_batch_norm_backward, in ``x``'s dtype."""
    rank = x.rank
    axes = [0, *range(2, rank)]
    centered = ops.sub(x, channel_view(mean, rank))
    sum_g = reduce_axes(grad, axes, False, ops.sum)
    dot = reduce_axes(ops.mul(grad, centered), axes, False, ops.sum)
    scale = ops.mul(rstd, weight)
    grad_input = ops.mul(grad, channel_view(scale, rank))
    if train:
        n = int(np.prod([int(x.shape[a]) for a in axes]))
        proj = ops.mul(ops.div(dot, as_tensor(n, x.dtype)), ops.mul(rstd, rstd))
        shift = ops.div(sum_g, as_tensor(n, x.dtype))
        grad_input = ops.mul(
            ops.sub(
                ops.sub(grad, ops.mul(centered, channel_view(proj, rank))),
                channel_view(shift, rank),
            ),
            channel_view(scale, rank),
        )
    return grad_input, ops.mul(dot, rstd), sum_g


@lowering(aten.native_batch_norm_backward.default)
def batch_norm_backward(
    grad_out: TensorValue,
    input: TensorValue,
    weight: TensorValue | None,
    running_mean: TensorValue | None,
    running_var: TensorValue | None,
    save_mean: TensorValue | None,
    save_invstd: TensorValue | None,
    train: bool,
    eps: float,
    output_mask: Sequence[bool],
) -> tuple[TensorValue | None, ...]:
    """native_batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool train, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)"""
    want = wanted_outputs(output_mask)
    channels = input.shape[1]
    device = input.device
    dtype = accumulation_dtype(input.dtype)
    w = (
        ops.cast(weight, dtype)
        if weight is not None
        else ops.constant(np.ones((int(channels),), dtype.to_numpy()), dtype, device)
    )
    if train:
        assert save_mean is not None and save_invstd is not None
        mean, rstd = ops.cast(save_mean, dtype), ops.cast(save_invstd, dtype)
    else:
        assert running_mean is not None and running_var is not None
        mean = ops.cast(running_mean, dtype)
        rstd = ops.rsqrt(ops.add(ops.cast(running_var, dtype), as_tensor(eps, dtype)))
    if train and _kernels_serve(dtype):
        twins = current().twins
        last = twins.twin(grad_out) is not None and twins.twin(input) is not None
        vector = TensorType(F32, [channels], device)
        g_runs = ops.cast(_channel_runs(grad_out, last), F32)
        x_runs = ops.cast(_channel_runs(input, last), F32)
        runs, grad_weight, grad_bias = custom(
            SHIPPED,
            "torch_max_backend_batch_norm_backward",
            [g_runs, x_runs, mean, rstd, w],
            [TensorType(F32, list(x_runs.shape), device), vector, vector],
            device,
        )
        grad_input = _from_runs(ops.cast(runs, input.dtype), input, last)
    else:
        grad_input, grad_weight, grad_bias = _composed_backward(
            ops.cast(grad_out, dtype), ops.cast(input, dtype), w, mean, rstd, train
        )
    outputs = [grad_input, grad_weight, grad_bias]
    return in_meta_dtypes(
        [v if keep else None for v, keep in zip(outputs, want, strict=True)]
    )
