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

from ...dtypes import to_max_dtype
from ...kernels.library import SHIPPED, custom
from ..context import current
from ..reduced_axes import reduce_axes
from ..registry import lowering
from ..scalars import as_tensor

aten = torch.ops.aten
F32 = DType.float32


def _f32(x: TensorValue) -> TensorValue:
    return x if x.dtype == F32 else ops.cast(x, F32)


def _like_meta(values: Sequence[TensorValue | None]) -> tuple[TensorValue | None, ...]:
    """Each output in the dtype torch gives it."""
    meta = current().out_meta
    assert isinstance(meta, (list, tuple))
    out: list[TensorValue | None] = []
    for value, m in zip(values, meta, strict=True):
        if value is not None and m is not None and value.dtype != to_max_dtype(m.dtype):
            value = ops.cast(value, to_max_dtype(m.dtype))
        out.append(value)
    return tuple(out)


def _channel_view(x: TensorValue, rank: int) -> TensorValue:
    """A per-channel [C] vector shaped to broadcast over N, C, *spatial."""
    return ops.reshape(x, [1, -1] + [1] * (rank - 2))


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


def _on_cpu() -> bool:
    return current().device.is_cpu()


def _composed_statistics(
    x: TensorValue, eps: float
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """Mean, rstd and unbiased variance per channel from MAX ops (float32)."""
    axes = [0, *range(2, x.rank)]
    mean = reduce_axes(x, axes, False, ops.mean)
    centered = ops.sub(x, _channel_view(mean, x.rank))
    variance = reduce_axes(ops.mul(centered, centered), axes, False, ops.mean)
    rstd = ops.rsqrt(ops.add(variance, as_tensor(eps, F32)))
    n = int(np.prod([int(x.shape[a]) for a in axes]))
    unbiased = ops.mul(variance, as_tensor(n / max(n - 1, 1), F32))
    return mean, rstd, unbiased


def _statistics(
    x: TensorValue,
    running_mean: TensorValue,
    running_var: TensorValue,
    momentum: float,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue, TensorValue]:
    """Mean, rstd, and the running statistics updated (float32)."""
    rm, rv = _f32(running_mean), _f32(running_var)
    if _on_cpu():
        device = current().device
        coefficients = ops.constant(
            np.array([eps, momentum], np.float32), F32, device=device
        )
        vector = TensorType(F32, [x.shape[1]], device)
        mean, rstd, new_rm, new_rv = custom(
            SHIPPED,
            "torch_max_backend_batch_norm_stats",
            [_f32(_read_runs(x)), rm, rv, coefficients],
            [vector] * 4,
            device,
        )
        return mean, rstd, new_rm, new_rv
    mean, rstd, unbiased = _composed_statistics(_f32(x), eps)
    keep = as_tensor(1 - momentum, F32)
    step = as_tensor(momentum, F32)
    new_rm = ops.add(ops.mul(mean, step), ops.mul(rm, keep))
    new_rv = ops.add(ops.mul(unbiased, step), ops.mul(rv, keep))
    return mean, rstd, new_rm, new_rv


def _normalized(
    x: TensorValue,
    mean: TensorValue,
    rstd: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
) -> TensorValue:
    """(x - mean) * rstd * weight + bias per channel, in float32, on the
    channels-last twin where ``x`` has one (the result then has one too)."""
    scale = rstd if weight is None else ops.mul(rstd, _f32(weight))
    shift = ops.negate(ops.mul(mean, scale))
    if bias is not None:
        shift = ops.add(shift, _f32(bias))
    twins = current().twins
    twin = twins.twin(x)
    if twin is not None:
        out = ops.add(ops.mul(_f32(twin), scale), shift)
        return twins.channels_first(ops.cast(out, x.dtype))
    view = _channel_view
    out = ops.add(ops.mul(_f32(x), view(scale, x.rank)), view(shift, x.rank))
    return ops.cast(out, x.dtype)


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
        rstd = ops.rsqrt(ops.add(_f32(running_var), as_tensor(eps, F32)))
        out = _normalized(input, _f32(running_mean), rstd, weight, bias)
        empty = ops.constant(np.zeros((0,), np.float32), F32, device=input.device)
        return _like_meta([out, empty, empty, running_mean, running_var])
    mean, rstd, new_rm, new_rv = _statistics(
        input, running_mean, running_var, momentum, eps
    )
    out = _normalized(input, mean, rstd, weight, bias)
    return _like_meta([out, mean, rstd, new_rm, new_rv])


def _wanted(output_mask: Sequence[bool]) -> list[bool]:
    """Outputs asked for and not None in torch's meta."""
    meta = current().out_meta
    assert isinstance(meta, (list, tuple))
    return [bool(m) and v is not None for m, v in zip(output_mask, meta, strict=True)]


def _composed_backward(
    grad: TensorValue,
    x: TensorValue,
    weight: TensorValue,
    mean: TensorValue,
    rstd: TensorValue,
    train: bool,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """torch's decomposition of native_batch_norm_backward, in float32."""
    rank = x.rank
    axes = [0, *range(2, rank)]
    centered = ops.sub(x, _channel_view(mean, rank))
    sum_g = reduce_axes(grad, axes, False, ops.sum)
    dot = reduce_axes(ops.mul(grad, centered), axes, False, ops.sum)
    scale = ops.mul(rstd, weight)
    grad_input = ops.mul(grad, _channel_view(scale, rank))
    if train:
        n = int(np.prod([int(x.shape[a]) for a in axes]))
        proj = ops.mul(ops.div(dot, as_tensor(n, F32)), ops.mul(rstd, rstd))
        shift = ops.div(sum_g, as_tensor(n, F32))
        grad_input = ops.mul(
            ops.sub(
                ops.sub(grad, ops.mul(centered, _channel_view(proj, rank))),
                _channel_view(shift, rank),
            ),
            _channel_view(scale, rank),
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
    want = _wanted(output_mask)
    channels = input.shape[1]
    device = input.device
    w = (
        _f32(weight)
        if weight is not None
        else ops.constant(np.ones((int(channels),), np.float32), F32, device=device)
    )
    if train:
        assert save_mean is not None and save_invstd is not None
        mean, rstd = _f32(save_mean), _f32(save_invstd)
    else:
        assert running_mean is not None and running_var is not None
        mean = _f32(running_mean)
        rstd = ops.rsqrt(ops.add(_f32(running_var), as_tensor(eps, F32)))
    if train and _on_cpu():
        twins = current().twins
        last = twins.twin(grad_out) is not None and twins.twin(input) is not None
        vector = TensorType(F32, [channels], device)
        g_runs = _f32(_channel_runs(grad_out, last))
        x_runs = _f32(_channel_runs(input, last))
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
            _f32(grad_out), _f32(input), w, mean, rstd, train
        )
    outputs = [grad_input, grad_weight, grad_bias]
    return _like_meta(
        [v if keep else None for v, keep in zip(outputs, want, strict=True)]
    )
