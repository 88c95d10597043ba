"""Normalization layers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from max.dtype import DType
from max.graph import DeviceRef, Dim, TensorValue, ops

from ...dtypes import accumulation_dtype
from .. import norm_kernels
from ..context import unread_output
from ..kit import device_of, empty_input, outputs_read, schema_args, tensor_meta
from ..output_meta import in_meta_dtypes
from ..per_channel import channel_view, normalized_channels
from ..registry import Strategy, lowering, lowering_strategies
from ..scalars import as_tensor
from ..shapes import normalize_dim, static_size

aten = torch.ops.aten


def _moments_last(
    x: TensorValue, eps: float
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """x - mean, mean and rstd over the last axis (kept dims; biased variance, as torch's)."""
    mean = ops.mean(x, -1)
    centered = ops.sub(x, mean)
    variance = ops.mean(ops.mul(centered, centered), -1)
    rstd = ops.rsqrt(ops.add(variance, as_tensor(eps, x.dtype)))
    return centered, mean, rstd


def _normalize_last(
    x: TensorValue, eps: float
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """(x - mean) * rstd over the last axis, with mean and rstd (kept dims)."""
    centered, mean, rstd = _moments_last(x, eps)
    return ops.mul(centered, rstd), mean, rstd


# Inputs that reach MAX's LayerNorm kernel in float32 (half precision is
# normalized in float32, as torch does).
_LAYER_NORM_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _rows_to_normalize(input: TensorValue, k: int) -> TensorValue:
    """``input`` with its last ``k`` dims flattened into one, in float32 for
    half precision (as torch's kernels compute the statistics; MAX's LayerNorm
    also takes a float32 epsilon only, so a bfloat16 one failed the whole
    graph's compile)."""
    lead = list(input.shape)[: input.rank - k]
    return ops.cast(ops.reshape(input, [*lead, -1]), accumulation_dtype(input.dtype))


def _statistics_unused(node: torch.fx.Node) -> str | None:
    """Nothing reads the mean and rstd outputs (inference); float32 or half precision, a positive epsilon."""
    args = schema_args(node)
    if (reason := _kernel_rows(args)) is not None:
        return reason
    if not args["eps"] > 0:
        return "epsilon not positive (MAX's LayerNorm takes a positive one)"
    if outputs_read(node) - {0}:
        return "the mean or rstd is read (a training graph saves them)"
    return None


def _layer_norm_kernel(
    input: TensorValue,
    normalized_shape: Sequence[int],
    weight: TensorValue | None,
    bias: TensorValue | None,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)"""
    # One LayerNorm kernel, where the composed form is three: MAX's compile
    # time follows the kernel count (25 chained layer norms compiled in 173 s
    # composed, 41 s as LayerNorm ops), and each kernel costs a decode step a
    # few microseconds. Its statistics are not outputs: placeholders stand
    # in for them, which nothing reads.
    x, w, b = _rows_and_affine(input, len(normalized_shape), weight, bias)
    out = ops.layer_norm(x, w, b, eps)
    (normalized,) = in_meta_dtypes([ops.reshape(out, list(input.shape))])
    return normalized, unread_output(), unread_output()


def _rows_and_affine(
    input: TensorValue,
    k: int,
    weight: TensorValue | None,
    bias: TensorValue | None,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """A layer norm kernel's operands: ``input`` with its last ``k`` dims
    flattened into one, and the weight and bias as vectors of that width
    (ones and zeros where absent)."""
    x = _rows_to_normalize(input, k)
    width = x.shape[-1]
    return (
        x,
        _flat_affine(weight, 1.0, x.dtype, width, input.device),
        _flat_affine(bias, 0.0, x.dtype, width, input.device),
    )


def _flat_affine(
    value: TensorValue | None,
    default: float,
    dtype: DType,
    width: int | Dim,
    device: DeviceRef,
) -> TensorValue:
    """A layer norm's weight or bias flattened to the normalized width, or a
    constant vector of ``default`` (a constant, not an op on one, which MAX
    would fold at compile time)."""
    if value is not None:
        return ops.cast(ops.reshape(value, [-1]), dtype)
    size = static_size(width)
    assert size is not None  # _statistics_unused: a static normalized shape
    return ops.constant(np.full((size,), default, np.float32), dtype, device=device)


def _statistics_on_cpu(node: torch.fx.Node) -> str | None:
    """The CPU, float32 or half precision (computed in float32), a static normalized shape."""
    args = schema_args(node)
    meta = tensor_meta(args["input"])
    if meta is not None and device_of(meta).type != "cpu":
        return "not on the CPU (our kernel is the CPU's)"
    return _kernel_rows(args)


def _kernel_rows(args: dict[str, Any]) -> str | None:
    """What both layer norm kernels need of an input: float32 or half
    precision (normalized in float32), a static normalized shape."""
    meta = tensor_meta(args["input"])
    if meta is None or meta.dtype not in _LAYER_NORM_KERNEL_DTYPES:
        return "not float32 or half precision (computed in float32)"
    if not all(isinstance(d, int) for d in args["normalized_shape"]):
        return "a symbolic normalized shape"
    return None


def _layer_norm_statistics_kernel(
    input: TensorValue,
    normalized_shape: Sequence[int],
    weight: TensorValue | None,
    bias: TensorValue | None,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)"""
    # One kernel of ours for the rows and their statistics (a training
    # graph reads them), where composed they are two MAX reductions per row
    # and the elementwise work around them, each a kernel to compile.
    x, w, b = _rows_and_affine(input, len(normalized_shape), weight, bias)
    rows = ops.reshape(x, [-1, x.shape[-1]])
    out, mean, rstd = norm_kernels.layer_norm_rows(rows, w, b, eps)
    shape = _statistics_shape(input, len(normalized_shape))
    return in_meta_dtypes(
        [
            ops.reshape(out, list(input.shape)),
            ops.reshape(mean, shape),
            ops.reshape(rstd, shape),
        ]
    )


def _statistics_shape(input: TensorValue, k: int) -> list[int | Dim]:
    """The mean's and rstd's shape: ``input``'s with its last ``k`` dims 1."""
    return list(input.shape)[: input.rank - k] + [1] * k


def _layer_norm_composed(
    input: TensorValue,
    normalized_shape: Sequence[int],
    weight: TensorValue | None,
    bias: TensorValue | None,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)"""
    x = _rows_to_normalize(input, len(normalized_shape))
    normalized, mean, rstd = _normalize_last(x, eps)
    out = ops.reshape(normalized, list(input.shape))
    if weight is not None:
        out = ops.mul(out, ops.cast(weight, x.dtype))
    if bias is not None:
        out = ops.add(out, ops.cast(bias, x.dtype))
    shape = _statistics_shape(input, len(normalized_shape))
    return in_meta_dtypes([out, ops.reshape(mean, shape), ops.reshape(rstd, shape)])


native_layer_norm = lowering_strategies(
    aten.native_layer_norm.default,
    supports=empty_input,
    candidates=[
        Strategy("layer_norm_kernel", _layer_norm_kernel, _statistics_unused),
        Strategy(
            "statistics_kernel", _layer_norm_statistics_kernel, _statistics_on_cpu
        ),
        Strategy("composed", _layer_norm_composed),
    ],
)


def _one_float32_dim(node: torch.fx.Node) -> str | None:
    """float32 over the last dim (lower/passes/rms_norms.py writes these)."""
    args = schema_args(node)
    meta = tensor_meta(args["input"])
    if meta is None or meta.dtype != torch.float32:
        return "not float32 (half precision stays composed, as eager rounds it)"
    if len(args["normalized_shape"]) != 1:
        return "more than one normalized dim"
    if args.get("weight") is None and not isinstance(meta.shape[-1], int):
        return "no weight and a symbolic normalized size"
    return None


@lowering(aten.rms_norm.default, supports=_one_float32_dim)
def rms_norm(
    input: TensorValue,
    normalized_shape: Sequence[int],
    weight: TensorValue | None = None,
    eps: float | None = None,
) -> TensorValue:
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"""
    # MAX's one RMS norm kernel, where the written-out norm was two.
    if weight is None:
        weight = _flat_affine(None, 1.0, DType.float32, input.shape[-1], input.device)
    epsilon = torch.finfo(torch.float32).eps if eps is None else eps
    return ops.rms_norm(input, weight, epsilon)


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
    # In float32 for half precision, as torch's kernels (and so that a
    # bfloat16 model's batch norm lowers at all).
    dtype = accumulation_dtype(input.dtype)
    variance = ops.cast(running_var, dtype)
    rstd = ops.rsqrt(ops.add(variance, as_tensor(eps, dtype)))
    out = normalized_channels(input, running_mean, rstd, weight, bias)
    # In inference torch returns empty saved statistics.
    empty = ops.constant(np.zeros((0,), np.float32), DType.float32, device=input.device)
    return in_meta_dtypes([out, empty, empty])


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
    # Statistics in float32 for half precision, as torch's kernels.
    dtype = accumulation_dtype(input.dtype)
    grouped = [N, group, -1]
    if input.rank == 3 and static_size(input.shape[1]) == group:
        # One channel a group: [N, group, -1] is the input's own shape, and
        # MAX then fuses the normalization and the per-channel weight into
        # its LayerNorm kernel with a weight it cannot take (the graph failed
        # to compile); one row a group hides the pattern.
        grouped = [-1, input.shape[2]]
    x = ops.cast(ops.reshape(input, grouped), dtype)
    normalized, mean, rstd = _normalize_last(x, eps)
    out = ops.reshape(normalized, list(input.shape))
    if weight is not None:
        out = ops.mul(out, channel_view(ops.cast(weight, dtype), input.rank))
    if bias is not None:
        out = ops.add(out, channel_view(ops.cast(bias, dtype), input.rank))
    return in_meta_dtypes(
        [out, ops.reshape(mean, [N, group]), ops.reshape(rstd, [N, group])]
    )


def _training(node: torch.fx.Node) -> bool:
    """The ``training`` argument of a ``_native_batch_norm_legit`` node."""
    return bool(schema_args(node).get("training"))


def _training_only(node: torch.fx.Node) -> str | None:
    """Training mode (evaluation mode without running statistics is an error in torch)."""
    if not _training(node):
        # torch raises too: without running statistics there is nothing to
        # normalize with in evaluation mode.
        return "batch norm in evaluation mode without running statistics"
    return None


@lowering(aten._native_batch_norm_legit.no_stats, supports=_training_only)
def batch_norm_no_stats(
    input: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    # Batch statistics per channel (InstanceNorm, or BatchNorm without
    # running stats); there is nothing to update, so momentum is unused.
    rank = input.rank
    dtype = accumulation_dtype(input.dtype)
    x = ops.cast(input, dtype)
    per_channel = ops.reshape(ops.permute(x, [1, 0, *range(2, rank)]), [x.shape[1], -1])
    _, mean, rstd = _moments_last(per_channel, eps)
    out = ops.mul(ops.sub(x, channel_view(mean, rank)), channel_view(rstd, rank))
    if weight is not None:
        out = ops.mul(out, channel_view(ops.cast(weight, dtype), rank))
    if bias is not None:
        out = ops.add(out, channel_view(ops.cast(bias, dtype), rank))
    return in_meta_dtypes([out, ops.reshape(mean, [-1]), ops.reshape(rstd, [-1])])


def _evaluation_only(node: torch.fx.Node) -> str | None:
    """Evaluation mode; training mode updates running statistics in place, which torch.compile graphs never contain."""
    if _training(node):
        # Training mode updates running_mean and running_var in place; a MAX
        # graph returns values and cannot write into its inputs. Functionalized
        # graphs (every graph torch.compile hands us) use the functional
        # variant instead, which torch decomposes.
        return "batch norm in training mode updates its running statistics in place"
    return None


@lowering(aten._native_batch_norm_legit.default, supports=_evaluation_only)
def batch_norm_legit_evaluation(
    input: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
    running_mean: TensorValue,
    running_var: TensorValue,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """_native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)"""
    # In evaluation mode nothing is mutated: the op is the inference form.
    return batch_norm_inference(
        input, weight, bias, running_mean, running_var, momentum, eps
    )


@lowering(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward(
    grad_w: TensorValue,
    saved_v: TensorValue,
    saved_g: TensorValue,
    saved_norms: TensorValue,
    dim: int,
) -> tuple[TensorValue, TensorValue]:
    """_weight_norm_interface_backward(Tensor grad_w, Tensor saved_v, Tensor saved_g, Tensor saved_norms, int dim) -> (Tensor, Tensor)"""
    # w = g * v / |v|, the norm taken over every axis but ``dim``:
    # dL/dg = <dL/dw, v> / |v| and dL/dv = g / |v| * (dL/dw - v <dL/dw, v> / |v|^2).
    dtype = accumulation_dtype(saved_v.dtype)
    v, grad, g, norms = (
        ops.cast(t, dtype) for t in (saved_v, grad_w, saved_g, saved_norms)
    )
    keep = normalize_dim(dim, saved_v.rank)
    dot = ops.mul(grad, v)
    for axis in range(saved_v.rank):
        if axis != keep:
            dot = ops.sum(dot, axis)
    grad_g = ops.div(dot, norms)
    scale = ops.div(dot, ops.mul(norms, norms))
    grad_v = ops.mul(ops.div(g, norms), ops.sub(grad, ops.mul(v, scale)))
    return in_meta_dtypes([grad_v, grad_g])
