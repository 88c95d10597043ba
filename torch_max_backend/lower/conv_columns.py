"""Convolutions through their windows' matrix (im2col) on the CPU.

A 2-d convolution is the filter, as a [O, C * kh * kw] matrix, times the
input's windows; its gradients are products with the same matrix: the
weight's is the output gradient times the windows, the input's is the
windows' gradient (the filter's transpose times the output gradient) added
back where each window was read (col2im). Both kernels are ours
(kernels/mojo/im2col.mojo, col2im.mojo): one pass over the image each, where
MAX's ops need a strided slice per kernel offset and a stack, and MAX's
conv2d runs small images with many channels (ResNet's deep layers) at a
third of eager's speed.
"""

from __future__ import annotations

from max.graph import TensorType, TensorValue, ops

from ..kernels.library import SHIPPED, custom
from .context import current
from .opmath import accumulated
from .products import product, product_by_rows
from .shapes import SizeLike, static_size
from .windows import window_parameters

Pair = tuple[int, int]


def windows(
    x: TensorValue,
    out_size: list,
    kernel: Pair,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
    *,
    channels_last: bool = False,
    batch_inner: bool = False,
) -> TensorValue:
    """The windows of ``x`` (NCHW, or NHWC when ``channels_last``) as im2col
    writes them: [N, C * kh * kw, out_h, out_w], or [C * kh * kw, N, out_h,
    out_w] with ``batch_inner``."""
    n = x.shape[0]
    channels = x.shape[3] if channels_last else x.shape[1]
    rows = channels * kernel[0] * kernel[1]
    shape = [rows, n, *out_size] if batch_inner else [n, rows, *out_size]
    device = current().device
    (cols,) = custom(
        SHIPPED,
        "torch_max_backend_im2col",
        [x],
        [TensorType(x.dtype, shape, device)],
        device,
        parameters={
            **window_parameters(kernel, stride, padding, dilation),
            "channels_last": channels_last,
            "batch_inner": batch_inner,
        },
    )
    return cols


def weight_grad(
    grad: TensorValue,
    input: TensorValue,
    kernel: Pair,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
) -> TensorValue:
    """An ungrouped convolution's weight gradient, [O, C, kh, kw]: the output
    gradient [O, N * P] times the windows [C * kh * kw, N * P] transposed,
    one product over the batch and the pixels at once.

    Where the pixels outnumber the output channels (a network's early
    layers) it is computed transposed, the windows times the gradient
    channels-last [N * P, O], both as the product reads them: the windows'
    transposed copy (576 x 1568 floats at 64 channels, 28x28) was slower
    than the product, and the small [C * kh * kw, O] result is turned instead.
    """
    n, out_channels, out_h, out_w = grad.shape
    channels = input.shape[1]
    rows = channels * kernel[0] * kernel[1]
    cols = windows(
        input, [out_h, out_w], kernel, stride, padding, dilation, batch_inner=True
    )
    pixels = n * out_h * out_w
    cols = ops.reshape(cols, [rows, pixels])
    known = static_size(pixels)
    if known is not None and known > int(out_channels):
        g_rows = ops.reshape(
            current().twins.channels_last(grad), [pixels, out_channels]
        )
        turned = accumulated(product, cols, g_rows)
        return ops.reshape(
            ops.transpose(turned, 0, 1), [out_channels, channels, *kernel]
        )
    g = ops.permute(ops.reshape(grad, [n, out_channels, out_h * out_w]), [1, 0, 2])
    g = ops.reshape(g, [out_channels, n * out_h * out_w])
    weight_grad = accumulated(product_by_rows, g, cols)
    return ops.reshape(weight_grad, [out_channels, channels, *kernel])


def depthwise_weight_grad(
    grad: TensorValue,
    input: TensorValue,
    kernel: Pair,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
) -> TensorValue:
    """A depthwise convolution's weight gradient, [O, 1, kh, kw] (each
    output channel reads one input channel, O a multiple of C), summed
    directly from the input and the output gradient by one kernel
    (kernels/mojo/depthwise_weight_grad.mojo) where the windows' matrix
    would be a batched product of one row per channel."""
    device = current().device
    (weight_grad,) = custom(
        SHIPPED,
        "torch_max_backend_depthwise_weight_grad",
        [grad, input],
        [TensorType(grad.dtype, [grad.shape[1], 1, *kernel], device)],
        device,
        parameters=window_parameters(kernel, stride, padding, dilation),
    )
    return weight_grad


def input_grad(
    grad: TensorValue,
    weight: TensorValue,
    size: tuple[SizeLike, SizeLike],
    stride: Pair,
    padding: Pair,
    dilation: Pair,
) -> TensorValue:
    """An ungrouped convolution's input gradient, [N, C, H, W] (``size``):
    the filter's transpose [C * kh * kw, O] times the output gradient
    [O, N * P] (one product over every image: a small image's pixels alone
    are too few columns for a fast product), added back into the images by
    col2im.

    Where the output channels outnumber the pixels (a network's deep
    layers) the product is taken turned, the gradient channels-last
    [N * P, O] times the filter as torch lays it out, and its small result
    is transposed instead of the filter: MAX's CPU transpose moves about
    3 GB/s (a 512x4608 filter: 3 ms, against 0.2 ms for the result).
    """
    n, out_channels, out_h, out_w = grad.shape
    _, channels, kh, kw = weight.shape
    rows = channels * kh * kw
    pixels = n * out_h * out_w
    known = static_size(pixels)
    turned = known is not None and known < int(out_channels)
    if turned:
        first = ops.reshape(current().twins.channels_last(grad), [pixels, out_channels])
        second = ops.reshape(weight, [out_channels, rows])
    else:
        first = ops.transpose(ops.reshape(weight, [out_channels, rows]), 0, 1)
        g = ops.permute(ops.reshape(grad, [n, out_channels, out_h * out_w]), [1, 0, 2])
        second = ops.reshape(g, [out_channels, pixels])
    device = current().device
    parameters: dict[str, int | bool] = {"batch_inner": True}
    parameters.update(window_parameters((int(kh), int(kw)), stride, padding, dilation))

    def summed_back(first: TensorValue, second: TensorValue) -> TensorValue:
        windows_grad = product(first, second)
        if turned:
            windows_grad = ops.transpose(windows_grad, 0, 1)
        cols = ops.reshape(windows_grad, [rows, n, out_h, out_w])
        (image,) = custom(
            SHIPPED,
            "torch_max_backend_col2im",
            [cols],
            [TensorType(cols.dtype, [n, channels, *size], device)],
            device,
            parameters=parameters,
        )
        return image

    # Half precision: the windows' gradient and col2im's sums in float32,
    # rounded once.
    return accumulated(summed_back, first, second)
