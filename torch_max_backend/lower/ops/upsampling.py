"""Upsampling: nearest, linear (1-D to 3-D) and bicubic, by gathers.

Upsampling reads the input at positions fixed by the static sizes: they are
computed here by torch's own formulas, in torch's precision, and baked into the
graph as index and weight constants for gathers, one axis at a time (torch's
CPU kernels are separable too).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..context import current
from ..kit import arg_tensor, fake_tensor, is_static
from ..registry import lowering
from ..shapes import static_size

aten = torch.ops.aten


def _spatial_sizes_static(node: torch.fx.Node) -> str | None:
    """Static input and output spatial sizes."""
    shapes = [arg_tensor(node, 0).shape[2:], fake_tensor(node).shape[2:]]
    if not all(is_static(shape) for shape in shapes):
        return "resampling symbolic spatial sizes"
    return None


def _out_spatial_sizes() -> list[int]:
    """The output's sizes after batch and channels (1 to 3 of them)."""
    meta = current().out_meta
    assert isinstance(meta, torch.Tensor)
    return [int(s) for s in meta.shape[2:]]


def _compute_in(x: TensorValue) -> tuple[TensorValue, np.dtype]:
    """``x`` in the float precision torch computes in, and its numpy dtype."""
    if x.dtype == DType.float64:
        return x, np.dtype(np.float64)
    # float32 math for float32 and, as torch's opmath, for float16/bfloat16.
    return ops.cast(x, DType.float32), np.dtype(np.float32)


def _constant(values: np.ndarray, dtype: DType) -> TensorValue:
    return ops.constant(values, dtype, device=current().device)


def _take(x: TensorValue, axis: int, indices: np.ndarray) -> TensorValue:
    return ops.gather(x, _constant(indices, DType.int64), axis)


def _inverse_scale(
    scale: float | None, in_size: int, out_size: int, dtype: np.dtype
) -> np.floating:
    # Given a scale factor, torch maps coordinates by its inverse, which can
    # differ from in_size / out_size when the output size was rounded.
    if scale is not None and scale > 0:
        return dtype.type(1.0 / scale)
    return dtype.type(in_size) / dtype.type(out_size)


def _nearest_indices(in_size: int, out_size: int, scale: float | None) -> np.ndarray:
    positions = np.arange(out_size, dtype=np.int64)
    if out_size == 2 * in_size:  # torch's exact shortcut
        return positions // 2
    ratio = _inverse_scale(scale, in_size, out_size, np.dtype(np.float32))
    source = np.floor(positions.astype(np.float32) * ratio).astype(np.int64)
    return np.minimum(source, in_size - 1)


@lowering(aten.upsample_nearest2d.vec, supports=_spatial_sizes_static)
def upsample_nearest2d(
    input: TensorValue,
    output_size: Sequence[int] | None,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor"""
    scales = scale_factors or [None, None]
    x = input
    for axis, out_size, scale in zip((2, 3), _out_spatial_sizes(), scales, strict=True):
        in_size = static_size(x.shape[axis])
        assert in_size is not None  # guaranteed by the capability check
        if out_size != in_size:
            x = _take(x, axis, _nearest_indices(in_size, out_size, scale))
    return x


def _linear_along(
    x: TensorValue,
    axis: int,
    out_size: int,
    align_corners: bool,
    scale: float | None,
    dtype: np.dtype,
) -> TensorValue:
    """Linear interpolation of ``x`` along ``axis``, as torch's CPU kernel does."""
    in_size = static_size(x.shape[axis])
    assert in_size is not None  # guaranteed by the capability check
    if out_size == in_size:
        return x
    positions = np.arange(out_size).astype(dtype)
    if align_corners:
        ratio = dtype.type(in_size - 1) / dtype.type(max(out_size - 1, 1))
        source = positions * ratio
    else:
        ratio = _inverse_scale(scale, in_size, out_size, dtype)
        half = dtype.type(0.5)
        source = np.maximum((positions + half) * ratio - half, dtype.type(0))
    low = np.minimum(np.floor(source).astype(np.int64), in_size - 1)
    high = np.minimum(low + 1, in_size - 1)
    high_weight = np.clip(source - low.astype(dtype), 0, 1).astype(dtype)
    low_weight = (dtype.type(1) - high_weight).astype(dtype)
    # Weights broadcast along ``axis`` over the dims after it.
    shape = (out_size,) + (1,) * (x.rank - 1 - axis)
    max_dtype = x.dtype
    return ops.add(
        ops.mul(_take(x, axis, low), _constant(low_weight.reshape(shape), max_dtype)),
        ops.mul(_take(x, axis, high), _constant(high_weight.reshape(shape), max_dtype)),
    )


def _linear_upsampling(
    input: TensorValue,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """Linear interpolation along every spatial axis in turn (torch's CPU
    kernels are separable too): one gather pair per axis."""
    out_sizes = _out_spatial_sizes()
    scales = scale_factors or [None] * len(out_sizes)
    x, dtype = _compute_in(input)
    for axis, (out_size, scale) in enumerate(zip(out_sizes, scales, strict=True), 2):
        x = _linear_along(x, axis, out_size, align_corners, scale, dtype)
    return ops.cast(x, input.dtype)


@lowering(aten.upsample_linear1d.vec, supports=_spatial_sizes_static)
def upsample_linear1d(
    input: TensorValue,
    output_size: Sequence[int] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """upsample_linear1d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    return _linear_upsampling(input, align_corners, scale_factors)


@lowering(aten.upsample_bilinear2d.vec, supports=_spatial_sizes_static)
def upsample_bilinear2d(
    input: TensorValue,
    output_size: Sequence[int] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    return _linear_upsampling(input, align_corners, scale_factors)


@lowering(aten.upsample_trilinear3d.vec, supports=_spatial_sizes_static)
def upsample_trilinear3d(
    input: TensorValue,
    output_size: Sequence[int] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """upsample_trilinear3d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    return _linear_upsampling(input, align_corners, scale_factors)


# torch's cubic convolution coefficient (Keys' kernel with A = -0.75).
_CUBIC_A = -0.75


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """The weights of the taps at floor - 1 .. floor + 2 for fractions ``t``."""
    a = t.dtype.type(_CUBIC_A)

    def near(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = t.dtype.type(1)
    return [far(t + one), near(t), near(one - t), far(one + one - t)]


def _cubic_along(
    x: TensorValue,
    axis: int,
    out_size: int,
    align_corners: bool,
    scale: float | None,
    dtype: np.dtype,
) -> TensorValue:
    """Cubic interpolation of ``x`` along ``axis`` from four clamped taps.
    Never skipped for an unchanged size: with a scale factor given, torch
    resamples such an axis too."""
    in_size = static_size(x.shape[axis])
    assert in_size is not None  # guaranteed by the capability check
    positions = np.arange(out_size).astype(dtype)
    if align_corners:
        ratio = dtype.type(in_size - 1) / dtype.type(max(out_size - 1, 1))
        source = positions * ratio
    else:  # unlike linear, not clamped at 0: the taps are clamped instead
        half = dtype.type(0.5)
        source = (positions + half) * _inverse_scale(scale, in_size, out_size, dtype)
        source = source - half
    floor = np.floor(source)
    weights = _cubic_weights((source - floor).astype(dtype))
    base = floor.astype(np.int64)
    shape = (out_size,) + (1,) * (x.rank - 1 - axis)
    terms = [
        ops.mul(
            _take(x, axis, np.clip(base + offset, 0, in_size - 1)),
            _constant(weight.astype(dtype).reshape(shape), x.dtype),
        )
        for offset, weight in zip((-1, 0, 1, 2), weights, strict=True)
    ]
    return ops.add(ops.add(terms[0], terms[1]), ops.add(terms[2], terms[3]))


@lowering(aten.upsample_bicubic2d.vec, supports=_spatial_sizes_static)
def upsample_bicubic2d(
    input: TensorValue,
    output_size: Sequence[int] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """upsample_bicubic2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    scales = scale_factors or [None, None]
    x, dtype = _compute_in(input)
    for axis, out_size, scale in zip((2, 3), _out_spatial_sizes(), scales, strict=True):
        x = _cubic_along(x, axis, out_size, align_corners, scale, dtype)
    return ops.cast(x, input.dtype)
