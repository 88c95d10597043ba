"""Transposed convolution, shared by the forward op and convolution's backward.

MAX's own conv2d_transpose has no groups; this one is a grouped stride-1
convolution over the zero-spread input, so it covers what torch allows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from max.dtype import DType
from max.graph import TensorValue, ops
from max.graph.type import ConvInputLayout, FilterLayout

from .context import current
from .opmath import accumulated
from .shapes import index_along


def per_axis(values: Sequence[int], count: int, default: int) -> tuple[int, ...]:
    """torch's stride/padding/dilation lists: empty, one for all axes, or one each."""
    if len(values) == 0:
        return (default,) * count
    if len(values) == 1:
        return (values[0],) * count
    return tuple(values[:count])


def pair(values: Sequence[int], default: int) -> tuple[int, int]:
    first, second = per_axis(values, 2, default)
    return first, second


def over_unit_height(
    stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """A 1-d convolution's parameters as those of a 2-d one over a height of 1."""
    return [1, *stride], [0, *padding], [1, *dilation]


def flip(x: TensorValue, axis: int) -> TensorValue:
    n = int(x.shape[axis])
    if n == 1:
        return x
    reverse = ops.constant(np.arange(n - 1, -1, -1), DType.int64, device=x.device)
    return ops.gather(x, reverse, axis=axis)


def crop(x: TensorValue, axis: int, before: int, after: int) -> TensorValue:
    """Drops ``before``/``after`` (non-negative) elements from the ends of ``axis``."""
    if before == 0 and after == 0:
        return x
    return index_along(x, axis, slice(before, int(x.shape[axis]) - after))


def transposed_conv2d(
    grad: TensorValue,
    weight: TensorValue,
    size: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
) -> TensorValue:
    """The transposed 2-d convolution of ``grad`` (NCHW) to spatial ``size``.

    It is the gradient of the forward convolution with respect to its input:
    a stride-1 convolution of ``grad``, spread out by the stride, with the
    flipped kernel whose in/out channels swap. ``weight`` has the forward
    convolution's OIHW layout, which is also torch's layout for a transposed
    convolution's weight (in, out / groups, kh, kw).
    """
    n, out_channels, out_h, out_w = grad.shape
    o, c_per_group, kh, kw = (int(d) for d in weight.shape)
    twins = current().twins  # channels-last values kept between ops
    x = twins.channels_last(grad)  # NHWC
    sh, sw = stride
    if sh > 1 or sw > 1:
        # Each grad element is followed by stride - 1 zeros along its axis.
        x = ops.reshape(x, [n, out_h, 1, out_w, 1, out_channels])
        x = ops.pad(x, [0, 0, 0, 0, 0, sh - 1, 0, 0, 0, sw - 1, 0, 0])
        x = ops.reshape(x, [n, out_h * sh, out_w * sw, out_channels])
    # Padding that gives exactly the input's size back; a negative amount
    # (large forward padding, or rows the forward never read) is a crop.
    pads = []
    for axis, (length, k, s, p, d, spread) in enumerate(
        zip(size, (kh, kw), stride, padding, dilation, (out_h, out_w), strict=True)
    ):
        before = d * (k - 1) - p
        after = length + p - int(spread) * s
        x = crop(x, axis + 1, max(0, -before), max(0, -after))
        pads += [max(0, before), max(0, after)]
    # Filter in RSCF, (kh, kw, O / groups, C): for each group, the forward
    # kernel's channel roles transposed.
    w = ops.reshape(weight, [groups, o // groups, c_per_group, kh, kw])
    w = ops.permute(w, [3, 4, 1, 0, 2])
    w = ops.reshape(w, [kh, kw, o // groups, groups * c_per_group])
    w = flip(flip(w, 0), 1)

    def conv(image: TensorValue, filters: TensorValue) -> TensorValue:
        return ops.conv2d(
            image,
            filters,
            stride=(1, 1),
            dilation=dilation,
            padding=(pads[0], pads[1], pads[2], pads[3]),
            groups=groups,
            input_layout=ConvInputLayout.NHWC,
            filter_layout=FilterLayout.RSCF,
        )

    return twins.channels_first(accumulated(conv, x, w))
