"""Upsampling: nearest, linear (1-D to 3-D) and bicubic, by gathers.

Upsampling reads the input at positions fixed by the static sizes: they are
computed here by torch's own formulas, in torch's precision, and baked into the
graph as index and weight constants for gathers, one axis at a time (torch's
CPU kernels are separable too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def _source_positions(
    in_size: int,
    out_size: int,
    align_corners: bool,
    scale: float | None,
    dtype: np.dtype,
) -> np.ndarray:
    """Where each output position reads the input, by torch's formula
    (before linear interpolation clamps it at 0)."""
    positions = np.arange(out_size).astype(dtype)
    if align_corners:
        return positions * (dtype.type(in_size - 1) / dtype.type(max(out_size - 1, 1)))
    half = dtype.type(0.5)
    return (positions + half) * _inverse_scale(scale, in_size, out_size, dtype) - half


def _weighted_taps(
    x: TensorValue,
    axis: int,
    taps: Sequence[tuple[np.ndarray, np.ndarray]],
    dtype: np.dtype,
) -> TensorValue:
    """The sum over ``taps`` of ``x`` gathered along ``axis`` at each tap's
    indices, times its weights (which broadcast over the dims after ``axis``)."""
    shape = (-1,) + (1,) * (x.rank - 1 - axis)
    terms = [
        ops.mul(
            _take(x, axis, indices),
            _constant(weights.astype(dtype).reshape(shape), x.dtype),
        )
        for indices, weights in taps
    ]
    while len(terms) > 1:  # pairwise: (t0 + t1) + (t2 + t3)
        terms = [ops.add(a, b) for a, b in zip(terms[::2], terms[1::2], strict=True)]
    return terms[0]


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
    source = _source_positions(in_size, out_size, align_corners, scale, dtype)
    if not align_corners:
        source = np.maximum(source, dtype.type(0))
    low = np.minimum(np.floor(source).astype(np.int64), in_size - 1)
    high = np.minimum(low + 1, in_size - 1)
    high_weight = np.clip(source - low.astype(dtype), 0, 1).astype(dtype)
    low_weight = (dtype.type(1) - high_weight).astype(dtype)
    return _weighted_taps(x, axis, [(low, low_weight), (high, high_weight)], dtype)


def _separable(
    input: TensorValue,
    along: Callable[..., TensorValue],
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """``along`` applied to every spatial axis in turn, in torch's precision
    (torch's CPU kernels are separable too)."""
    out_sizes = _out_spatial_sizes()
    scales = scale_factors or [None] * len(out_sizes)
    x, dtype = _compute_in(input)
    for axis, (out_size, scale) in enumerate(zip(out_sizes, scales, strict=True), 2):
        x = along(x, axis, out_size, align_corners, scale, dtype)
    return ops.cast(x, input.dtype)


@lowering(
    aten.upsample_linear1d.vec,
    aten.upsample_bilinear2d.vec,
    aten.upsample_trilinear3d.vec,
    supports=_spatial_sizes_static,
)
def upsample_linear(
    input: TensorValue,
    output_size: Sequence[int] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """upsample_linear1d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor
    upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor
    upsample_trilinear3d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor
    """
    return _separable(input, _linear_along, align_corners, scale_factors)


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
    resamples such an axis too. Unlike linear's, its source positions are not
    clamped at 0: the taps are clamped instead."""
    in_size = static_size(x.shape[axis])
    assert in_size is not None  # guaranteed by the capability check
    source = _source_positions(in_size, out_size, align_corners, scale, dtype)
    floor = np.floor(source)
    weights = _cubic_weights((source - floor).astype(dtype))
    base = floor.astype(np.int64)
    taps = [
        (np.clip(base + offset, 0, in_size - 1), weight)
        for offset, weight in zip((-1, 0, 1, 2), weights, strict=True)
    ]
    return _weighted_taps(x, axis, taps, dtype)


@lowering(aten.upsample_bicubic2d.vec, supports=_spatial_sizes_static)
def upsample_bicubic2d(
    input: TensorValue,
    output_size: Sequence[int] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """upsample_bicubic2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    return _separable(input, _cubic_along, align_corners, scale_factors)
