"""Resampling: nearest and bilinear upsampling, grid sampling, col2im.

Upsampling reads the input at positions fixed by the static sizes: they are
computed here by torch's own formulas, in torch's precision, and baked into the
graph as index and weight constants for gathers. Grid sampling computes its
positions in the graph from the grid and gathers whole pixels (channel vectors)
with ``gather_nd``. col2im is MAX's ``fold``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..context import current
from ..kit import arg_tensor, fake_tensor, is_static, node_arg
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import static_size

aten = torch.ops.aten

# torch's enums for grid_sampler_2d.
_BILINEAR, _NEAREST = 0, 1
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _spatial_sizes_static(node: torch.fx.Node) -> str | None:
    """Static input and output spatial sizes."""
    shapes = [arg_tensor(node, 0).shape[-2:], fake_tensor(node).shape[-2:]]
    if not all(is_static(shape) for shape in shapes):
        return "resampling symbolic spatial sizes"
    return None


def _out_spatial_sizes() -> list[int]:
    meta = current().out_meta
    assert isinstance(meta, torch.Tensor)
    return [int(s) for s in meta.shape[-2:]]


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


# -- upsampling -----------------------------------------------------------------


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


@lowering(aten.upsample_bilinear2d.vec, supports=_spatial_sizes_static)
def upsample_bilinear2d(
    input: TensorValue,
    output_size: Sequence[int] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> TensorValue:
    """upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor"""
    scales = scale_factors or [None, None]
    x, dtype = _compute_in(input)
    for axis, out_size, scale in zip((2, 3), _out_spatial_sizes(), scales, strict=True):
        x = _linear_along(x, axis, out_size, align_corners, scale, dtype)
    return ops.cast(x, input.dtype)


# -- grid sampling --------------------------------------------------------------


def _grid_sampler_covered(node: torch.fx.Node) -> str | None:
    """Bilinear and nearest modes over a static height and width."""
    mode = node_arg(node, 2, "interpolation_mode", None)
    if mode not in (_BILINEAR, _NEAREST):
        return "grid sampling with bicubic interpolation"
    if not is_static(arg_tensor(node, 0).shape[-2:]):
        return "grid sampling an input of symbolic height or width"
    return None


def _reflect(pos: TensorValue, twice_low: int, twice_high: int) -> TensorValue:
    """Fold ``pos`` into [low, high] by reflecting at the bounds, as torch does.

    The bounds come doubled so that half-integers (-0.5) are exact ints.
    """
    if twice_low == twice_high:  # a single pixel: everything maps onto it
        return ops.broadcast_to(as_tensor(0.0, pos.dtype), pos.shape)
    low = as_tensor(twice_low / 2, pos.dtype)
    span = as_tensor((twice_high - twice_low) / 2, pos.dtype)
    distance = ops.abs(ops.sub(pos, low))
    flips = ops.floor(ops.div(distance, span))
    extra = ops.sub(distance, ops.mul(flips, span))
    two = as_tensor(2.0, pos.dtype)
    even = ops.equal(flips, ops.mul(ops.floor(ops.div(flips, two)), two))
    return ops.add(ops.where(even, extra, ops.sub(span, extra)), low)


def _source_positions(
    coords: TensorValue, size: int, padding_mode: int, align_corners: bool
) -> TensorValue:
    """Grid coordinates in [-1, 1] to pixel positions along a dim of ``size``."""
    # The affine form of torch's vectorized CPU kernel, for the same rounding.
    scale = (size - 1) / 2 if align_corners else size / 2
    pos = ops.add(
        ops.mul(coords, as_tensor(scale, coords.dtype)),
        as_tensor((size - 1) / 2, coords.dtype),
    )
    if padding_mode == _ZEROS:
        return pos
    if padding_mode == _REFLECTION:
        if align_corners:
            pos = _reflect(pos, 0, 2 * (size - 1))
        else:
            pos = _reflect(pos, -1, 2 * size - 1)
    # Border clamps; reflection clamps too, for positions at the very edge.
    lowest = as_tensor(0.0, pos.dtype)
    highest = as_tensor(float(size - 1), pos.dtype)
    return ops.min(ops.max(pos, lowest), highest)


def _tap(
    pixels: TensorValue,
    xs: TensorValue,
    ys: TensorValue,
    weight: TensorValue | None,
) -> TensorValue:
    """Pixels (N, H, W, C) at integral float positions (N, Ho, Wo), weighted.

    Positions outside the image read zeros; NaN ones too, as they fail every
    comparison.
    """
    height, width = (static_size(d) for d in pixels.shape[1:3])
    assert height is not None and width is not None
    dtype = xs.dtype
    zero = as_tensor(0.0, dtype)
    inside = ops.logical_and(
        ops.logical_and(
            ops.greater_equal(xs, zero),
            ops.greater_equal(as_tensor(float(width - 1), dtype), xs),
        ),
        ops.logical_and(
            ops.greater_equal(ys, zero),
            ops.greater_equal(as_tensor(float(height - 1), dtype), ys),
        ),
    )
    # Gather only valid indices; the mask zeroes what outside ones read.
    index = ops.stack(
        [
            ops.cast(ops.where(inside, ys, zero), DType.int64),
            ops.cast(ops.where(inside, xs, zero), DType.int64),
        ],
        axis=-1,
    )
    values = ops.gather_nd(pixels, index, batch_dims=1)
    one = as_tensor(1.0, dtype)
    mask = ops.where(inside, one if weight is None else weight, zero)
    return ops.mul(values, ops.unsqueeze(mask, -1))


@lowering(aten.grid_sampler_2d.default, supports=_grid_sampler_covered)
def grid_sampler_2d(
    input: TensorValue,
    grid: TensorValue,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
) -> TensorValue:
    """grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor"""
    x, _ = _compute_in(input)
    grid = ops.cast(grid, x.dtype)
    height, width = (static_size(d) for d in x.shape[2:])
    assert height is not None and width is not None  # the capability check
    # NHWC, so that one gathered index pair reads a pixel's channels at once.
    pixels = ops.permute(x, [0, 2, 3, 1])
    xs = _source_positions(grid[..., 0], width, padding_mode, align_corners)
    ys = _source_positions(grid[..., 1], height, padding_mode, align_corners)
    if interpolation_mode == _NEAREST:
        # torch rounds half to even (nearbyint), as ops.round does.
        out = _tap(pixels, ops.round(xs), ops.round(ys), None)
    else:
        one = as_tensor(1.0, xs.dtype)
        x0, y0 = ops.floor(xs), ops.floor(ys)
        x1, y1 = ops.add(x0, one), ops.add(y0, one)
        # Each corner weighs the area of the rectangle opposite to it.
        corners = [
            (x0, y0, ops.mul(ops.sub(x1, xs), ops.sub(y1, ys))),
            (x1, y0, ops.mul(ops.sub(xs, x0), ops.sub(y1, ys))),
            (x0, y1, ops.mul(ops.sub(x1, xs), ops.sub(ys, y0))),
            (x1, y1, ops.mul(ops.sub(xs, x0), ops.sub(ys, y0))),
        ]
        out = _tap(pixels, *corners[0])
        for cx, cy, weight in corners[1:]:
            out = ops.add(out, _tap(pixels, cx, cy, weight))
    return ops.cast(ops.permute(out, [0, 3, 1, 2]), input.dtype)


# -- col2im ---------------------------------------------------------------------


def _pair(values: Sequence[int] | int) -> tuple[int, int]:
    if isinstance(values, int):
        return (values, values)
    return (values[0], values[-1])


def _static_output_size(node: torch.fx.Node) -> str | None:
    """A static output size."""
    if not is_static(node_arg(node, 1, "output_size", ())):
        return "col2im to a symbolic output size"
    return None


@lowering(aten.col2im.default, supports=_static_output_size)
def col2im(
    self: TensorValue,
    output_size: Sequence[int],
    kernel_size: Sequence[int],
    dilation: Sequence[int],
    padding: Sequence[int],
    stride: Sequence[int],
) -> TensorValue:
    """col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"""
    # torch also folds unbatched (C * kh * kw, L) blocks; MAX wants a batch.
    unbatched = self.rank == 2
    x = ops.unsqueeze(self, 0) if unbatched else self
    height, width = output_size[0], output_size[-1]
    pad_h, pad_w = _pair(padding)
    # MAX's fold misplaces blocks when given padding (MAX 26.7): fold onto the
    # padded image instead, which has the same blocks, and crop the padding.
    out = ops.fold(
        x,
        (height + 2 * pad_h, width + 2 * pad_w),
        _pair(kernel_size),
        stride=_pair(stride),
        dilation=_pair(dilation),
    )
    out = out[:, :, pad_h : pad_h + height, pad_w : pad_w + width]
    return ops.squeeze(out, 0) if unbatched else out
