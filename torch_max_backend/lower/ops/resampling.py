"""Resampling: grid sampling and col2im.

Grid sampling computes its positions in the graph from the grid and gathers
whole pixels (channel vectors) with ``gather_nd``. col2im is MAX's ``fold``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..kit import arg_tensor, is_static, node_arg
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import static_size
from .upsampling import _compute_in

aten = torch.ops.aten

# torch's enums for grid_sampler_2d.
_BILINEAR, _NEAREST = 0, 1
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


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


def in_image(xs: TensorValue, ys: TensorValue, height: int, width: int) -> TensorValue:
    """Whether each float position (x, y) lies on the image's pixels (NaN
    fails every comparison, so it does not)."""
    zero = as_tensor(0.0, xs.dtype)
    return ops.logical_and(
        ops.logical_and(
            ops.greater_equal(xs, zero),
            ops.greater_equal(as_tensor(float(width - 1), xs.dtype), xs),
        ),
        ops.logical_and(
            ops.greater_equal(ys, zero),
            ops.greater_equal(as_tensor(float(height - 1), ys.dtype), ys),
        ),
    )


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
    inside = in_image(xs, ys, height, width)
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
