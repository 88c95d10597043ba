"""Transposed convolution, shared by the forward op and convolution's backward.

MAX's own conv2d_transpose has no groups (and there is no 3-d one); this one
is a grouped stride-1 convolution over the zero-spread input, in 2-d and 3-d,
so it covers what torch allows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from max.dtype import DType
from max.graph import DeviceRef, TensorValue, ops
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


# Output channels a group from which MAX 26.7's CPU conv2d may misread a
# padded grouped filter: twice the 8 floats of an AVX2 vector (twice 16 on
# AVX-512, where it was seen to fail from 32 on).
MISREAD_CHANNELS_A_GROUP = 16


def _misread_by_max(
    filters: TensorValue, pads: Sequence[int], groups: int, device: DeviceRef
) -> bool:
    """Whether MAX 26.7's CPU conv2d would sum this grouped convolution
    wrongly without a word.

    It packs a grouped RSCF filter by a micro-kernel width picked from the
    output's width and the padding, and its grouped kernel reads the filter
    by its default width. Unpadded, both are the default; padded, they differ
    for some widths, and a group of fewer output channels than twice a
    vector's floats is cut alike either way. Seen: 16 channels a group on an
    AVX2 Zen 3, 32 on images up to 14 wide on an AVX-512 Zen 4 (errors as
    large as the outputs).
    """
    if groups == 1 or not device.is_cpu() or not any(pads):
        return False
    return int(filters.shape[-1]) // groups >= MISREAD_CHANNELS_A_GROUP


def channels_last_conv(
    image: TensorValue,
    filters: TensorValue,
    stride: Sequence[int],
    dilation: Sequence[int],
    pads: Sequence[int],
    groups: int,
    bias: TensorValue | None = None,
) -> TensorValue:
    """MAX's 2-d or 3-d convolution of a channels-last ``image`` by ``filters``
    in RSCF (QRSCF) layout; ``pads`` holds each spatial axis's (before, after)."""
    if image.rank == 4 and _misread_by_max(filters, pads, groups, image.device):
        # MAX's conv3d packs by its kernel's default width (and folds a pad
        # made beforehand back into the conv2d op, so padding first would not
        # do): the 2-d convolution is a 3-d one over a depth of 1.
        out = channels_last_conv(
            ops.unsqueeze(image, 1),
            ops.unsqueeze(filters, 0),
            (1, *stride),
            (1, *dilation),
            (0, 0, *pads),
            groups,
            bias,
        )
        return ops.squeeze(out, 1)
    if image.rank == 4:
        conv, layout = ops.conv2d, FilterLayout.RSCF
    else:
        conv, layout = ops.conv3d, FilterLayout.QRSCF

    def convolve(x: TensorValue, w: TensorValue, b: TensorValue | None) -> TensorValue:
        return conv(
            x,
            w,
            stride=tuple(stride),
            dilation=tuple(dilation),
            padding=tuple(pads),
            groups=groups,
            bias=b,
            input_layout=ConvInputLayout.NHWC,
            filter_layout=layout,
        )

    return accumulated(convolve, image, filters, bias)


def forward_conv(
    x: TensorValue,
    weight: TensorValue,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> TensorValue:
    """The 2-d or 3-d convolution of ``x`` (N, C, *spatial) by ``weight`` in
    torch's layout (O, C / groups, *kernel), by MAX's conv op."""
    spatial = weight.rank - 2
    filters = ops.permute(weight, [*range(2, 2 + spatial), 1, 0])
    pads = [p for p in padding for _ in range(2)]
    twins = current().twins  # channels-last values kept between ops
    out = channels_last_conv(
        twins.channels_last(x), filters, stride, dilation, pads, groups
    )
    return twins.channels_first(out)


def transposed_conv(
    grad: TensorValue,
    weight: TensorValue,
    size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> TensorValue:
    """The transposed 2-d or 3-d convolution of ``grad`` (N, C, *spatial) to
    spatial ``size``.

    It is the gradient of the forward convolution with respect to its input:
    a stride-1 convolution of ``grad``, spread out by the stride, with the
    flipped kernel whose in/out channels swap. ``weight`` has the forward
    convolution's O, C / groups, *kernel layout, which is also torch's layout
    for a transposed convolution's weight (in, out / groups, *kernel).
    """
    spatial = weight.rank - 2
    n, out_channels = grad.shape[0], grad.shape[1]
    spread = [int(d) for d in grad.shape[2:]]
    o, c_per_group, *kernel = (int(d) for d in weight.shape)
    twins = current().twins  # channels-last values kept between ops
    x = twins.channels_last(grad)  # N, *spatial, C
    if any(s > 1 for s in stride):
        # Each grad element is followed by stride - 1 zeros along its axis.
        x = ops.reshape(
            x, [n, *(d for length in spread for d in (length, 1)), out_channels]
        )
        x = ops.pad(x, [0, 0, *(p for s in stride for p in (0, 0, 0, s - 1)), 0, 0])
        x = ops.reshape(
            x,
            [
                n,
                *(length * s for length, s in zip(spread, stride, strict=True)),
                out_channels,
            ],
        )
    # Padding that gives exactly the input's size back; a negative amount
    # (large forward padding, or rows the forward never read) is a crop.
    pads = []
    for axis, (length, k, s, p, d, count) in enumerate(
        zip(size, kernel, stride, padding, dilation, spread, strict=True)
    ):
        before = d * (k - 1) - p
        after = length + p - count * s
        x = crop(x, axis + 1, max(0, -before), max(0, -after))
        pads += [max(0, before), max(0, after)]
    # Filter in (Q)RSCF, (*kernel, O / groups, C): for each group, the forward
    # kernel's channel roles transposed, each spatial axis flipped.
    w = ops.reshape(weight, [groups, o // groups, c_per_group, *kernel])
    w = ops.permute(w, [*range(3, 3 + spatial), 1, 0, 2])
    w = ops.reshape(w, [*kernel, o // groups, groups * c_per_group])
    for axis in range(spatial):
        w = flip(w, axis)
    out = channels_last_conv(x, w, [1] * spatial, dilation, pads, groups)
    return twins.channels_first(out)
