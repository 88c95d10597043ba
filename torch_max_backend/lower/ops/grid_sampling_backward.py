"""grid_sampler_2d's backward: the gradients of the input and of the grid.

Each output pixel read up to four input pixels (bilinear) or one
(nearest), weighted: the input's gradient adds the output's gradient,
weighted alike, back into those pixels (one ``scatter_nd_add`` for every
corner), and the grid's is the change of the weighted sum as the position
moves, times how the position moves with the grid coordinate (torch's
``*_set_grad`` rules: a clamped or border position does not move, a
reflected one moves backwards on every other fold).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..kit import arg_tensor, is_static, schema_args
from ..output_meta import in_meta_dtypes, wanted_outputs
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import static_size
from .resampling import (
    _BILINEAR,
    _NEAREST,
    _REFLECTION,
    _ZEROS,
    _source_positions,
    in_image,
)
from .upsampling import _compute_in

aten = torch.ops.aten


def _slope(
    coords: TensorValue,
    clamped: TensorValue,
    size: int,
    padding_mode: int,
    align_corners: bool,
) -> TensorValue:
    """How a pixel position moves with its grid coordinate (torch's
    ``grid_sampler_compute_source_index_set_grad``); ``clamped`` is the
    position ``_source_positions`` gave it."""
    dtype = coords.dtype
    scale = (size - 1) / 2 if align_corners else size / 2
    slope = ops.broadcast_to(as_tensor(scale, dtype), coords.shape)
    if padding_mode == _ZEROS:
        return slope
    zero, one = as_tensor(0.0, dtype), as_tensor(1.0, dtype)
    pos = ops.add(
        ops.mul(coords, as_tensor(scale, dtype)), as_tensor((size - 1) / 2, dtype)
    )
    if padding_mode == _REFLECTION:
        twice_low, twice_high = (
            (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        )
        if twice_low == twice_high:
            return ops.broadcast_to(zero, coords.shape)
        low = as_tensor(twice_low / 2, dtype)
        span = as_tensor((twice_high - twice_low) / 2, dtype)
        shifted = ops.sub(pos, low)
        sign = ops.where(ops.greater_equal(shifted, zero), one, ops.negate(one))
        flips = ops.floor(ops.div(ops.abs(shifted), span))
        two = as_tensor(2.0, dtype)
        even = ops.equal(flips, ops.mul(ops.floor(ops.div(flips, two)), two))
        slope = ops.mul(slope, ops.where(even, sign, ops.negate(sign)))
    # The clamp after: positions at either border or past it do not move.
    inside = ops.logical_and(
        ops.greater(clamped, zero),
        ops.greater(as_tensor(float(size - 1), dtype), clamped),
    )
    return ops.where(inside, slope, zero)


def _pixel_index(
    xs: TensorValue, ys: TensorValue, inside: TensorValue, batch: TensorValue
) -> TensorValue:
    """(n, y, x) of each position, (0, 0) where outside (masked by the caller)."""
    zero = as_tensor(0.0, xs.dtype)
    y = ops.cast(ops.where(inside, ys, zero), DType.int64)
    x = ops.cast(ops.where(inside, xs, zero), DType.int64)
    return ops.stack([ops.broadcast_to(batch, y.shape), y, x], axis=-1)


def _covered(node: torch.fx.Node) -> str | None:
    """Bilinear and nearest modes over a static height and width."""
    if schema_args(node)["interpolation_mode"] not in (_BILINEAR, _NEAREST):
        return "the gradient of grid sampling with bicubic interpolation"
    if not is_static(arg_tensor(node, 1).shape[-2:]):
        return "the gradient of grid sampling an input of symbolic height or width"
    return None


@lowering(aten.grid_sampler_2d_backward.default, supports=_covered)
def grid_sampler_2d_backward(
    grad_output: TensorValue,
    input: TensorValue,
    grid: TensorValue,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
    output_mask: Sequence[bool],
) -> tuple[TensorValue | None, TensorValue | None]:
    """grid_sampler_2d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)"""
    want_input, want_grid = wanted_outputs(output_mask)
    x, _ = _compute_in(input)
    dtype = x.dtype
    grid = ops.cast(grid, dtype)
    height, width = (static_size(d) for d in x.shape[2:])
    assert height is not None and width is not None  # the capability check
    # NHWC: one index triple names a pixel's channels at once.
    pixels = ops.permute(x, [0, 2, 3, 1])
    g = ops.permute(ops.cast(grad_output, dtype), [0, 2, 3, 1])
    coords_x, coords_y = grid[..., 0], grid[..., 1]
    xs = _source_positions(coords_x, width, padding_mode, align_corners)
    ys = _source_positions(coords_y, height, padding_mode, align_corners)
    n = x.shape[0]
    stop = ops.cast(ops.shape_to_tensor([n]).reshape([]), DType.int64)
    batch = ops.range(0, stop, 1, out_dim=n, dtype=DType.int64, device=x.device)
    batch = ops.reshape(batch, [n, 1, 1])
    zero, one = as_tensor(0.0, dtype), as_tensor(1.0, dtype)
    if interpolation_mode == _NEAREST:
        # torch rounds half to even (nearbyint), as ops.round does.
        corners = [(ops.round(xs), ops.round(ys), one)]
    else:
        x0, y0 = ops.floor(xs), ops.floor(ys)
        x1, y1 = ops.add(x0, one), ops.add(y0, one)
        right, left = ops.sub(xs, x0), ops.sub(x1, xs)
        below, above = ops.sub(ys, y0), ops.sub(y1, ys)
        # Each corner weighs the area of the rectangle opposite to it; with
        # its d(weight)/dx and d(weight)/dy.
        corners = [
            (x0, y0, ops.mul(left, above), ops.negate(above), ops.negate(left)),
            (x1, y0, ops.mul(right, above), above, ops.negate(right)),
            (x0, y1, ops.mul(left, below), ops.negate(below), left),
            (x1, y1, ops.mul(right, below), below, right),
        ]
    indices, updates = [], []
    grad_x = grad_y = None
    for cx, cy, weight, *slopes in corners:
        inside = in_image(cx, cy, height, width)
        index = _pixel_index(cx, cy, inside, batch)
        if want_input:
            w = ops.unsqueeze(ops.where(inside, weight, zero), -1)
            indices.append(index)
            updates.append(ops.mul(g, w))
        if want_grid and slopes:
            # The gradient times the corner's pixel, summed over channels.
            values = ops.gather_nd(pixels, index[..., 1:], batch_dims=1)
            seen = ops.where(
                inside, ops.squeeze(ops.sum(ops.mul(g, values), -1), -1), zero
            )
            dx, dy = (ops.mul(seen, s) for s in slopes)
            grad_x = dx if grad_x is None else ops.add(grad_x, dx)
            grad_y = dy if grad_y is None else ops.add(grad_y, dy)
    grad_input = grad_grid = None
    if want_input:
        image = ops.broadcast_to(zero, pixels.shape)
        summed = ops.scatter_nd_add(
            image, ops.concat(updates, 0), ops.concat(indices, 0)
        )
        grad_input = ops.permute(summed, [0, 3, 1, 2])
    if want_grid:
        if grad_x is None or grad_y is None:
            # Nearest sampling is flat between pixels: no gradient.
            grad_grid = ops.broadcast_to(zero, grid.shape)
        else:
            grad_grid = ops.stack(
                [
                    ops.mul(
                        grad_x, _slope(coords_x, xs, width, padding_mode, align_corners)
                    ),
                    ops.mul(
                        grad_y,
                        _slope(coords_y, ys, height, padding_mode, align_corners),
                    ),
                ],
                axis=-1,
            )
    return in_meta_dtypes([grad_input, grad_grid])
