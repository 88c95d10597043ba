"""Convolutions of channels-last filters on the CPU: each output pixel's
window a row, times the filter as it is stored.

A model converted with ``model.to(memory_format=torch.channels_last)`` holds
its filters [O, C, kh, kw] in [O, kh, kw, C] memory, and the graph takes
them as that channels-last view (lower/builder/channels_last_inputs.py): no
copy at the call. Read as torch's [O, C * kh * kw] matrix, such a filter is
a transpose MAX makes at every call, at its permute's few GB/s (ResNet-18's
3x3 filters on its 14x14 and 7x7 maps, 10.5 M floats). Read as stored, it
is an [O, kh * kw * C] matrix whose columns follow the windows' rows as our
kernel writes them from the channels-last image (kernels/mojo_windows); the
product [pixels, O] is the output channels-last, kept as its twin
(lower/layout.py) for the next layer.
"""

from __future__ import annotations

from max.graph import TensorType, TensorValue, ops

from ..kernels.library import WINDOWS, custom
from .context import current
from .opmath import accumulated
from .products import product, product_by_rows
from .windows import window_parameters

Pair = tuple[int, int]


def pixel_windows(
    image: TensorValue,
    out_size: Pair,
    kernel: Pair,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
) -> TensorValue:
    """The windows of ``image`` (N, H, W, C) as an [N * out_h * out_w, kh *
    kw * C] matrix, each output pixel's a row in (kernel row, kernel column,
    channel) order."""
    n, _, _, channels = image.shape
    rows = int(channels) * kernel[0] * kernel[1]
    device = current().device
    (cols,) = custom(
        WINDOWS,
        "torch_max_backend_pixel_windows",
        [image],
        [TensorType(image.dtype, [n, *out_size, rows], device)],
        device,
        parameters=window_parameters(kernel, stride, padding, dilation),
    )
    return ops.reshape(cols, [n * out_size[0] * out_size[1], rows])


def conv2d_by_pixels(
    input: TensorValue,
    filters: TensorValue,
    bias: TensorValue | None,
    out_size: Pair,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
) -> TensorValue:
    """An ungrouped 2-d convolution of ``input`` (N, C, H, W) by ``filters``
    given channels-last ([O, kh, kw, C]), returned as N, C, H, W with its
    channels-last twin."""
    out_channels, kh, kw, channels = (int(d) for d in filters.shape)
    twins = current().twins
    image = twins.channels_last(input)
    pixels = pixel_windows(image, out_size, (kh, kw), stride, padding, dilation)
    matrix = ops.reshape(filters, [out_channels, kh * kw * channels])
    out = accumulated(product_by_rows, pixels, matrix)
    if bias is not None:
        out = ops.add(out, bias)
    n = image.shape[0]
    return twins.channels_first(ops.reshape(out, [n, *out_size, out_channels]))


def weight_grad_by_pixels(
    grad: TensorValue,
    input: TensorValue,
    kernel: Pair,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
) -> TensorValue:
    """The weight gradient [O, C, kh, kw] of an ungrouped 2-d convolution of
    a channels-last model, with its channels-last twin [O, kh, kw, C]: the
    output gradient channels-last [P, O], read transposed, times the input's
    windows a pixel a row [P, kh * kw * C]. Its rows come out in the
    filter's own memory order, so the backward returns it channels-last
    with no transpose, and autograd keeps it as the parameter's gradient
    instead of copying it into the parameter's layout."""
    twins = current().twins
    _, out_channels, out_h, out_w = grad.shape
    image = twins.channels_last(input)
    channels = int(image.shape[3])
    size = (int(out_h), int(out_w))
    cols = pixel_windows(image, size, kernel, stride, padding, dilation)
    g = ops.reshape(twins.channels_last(grad), [cols.shape[0], out_channels])
    summed = accumulated(product, ops.transpose(g, 0, 1), cols)
    return twins.channels_first(ops.reshape(summed, [out_channels, *kernel, channels]))
