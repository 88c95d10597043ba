"""Our register-tiled convolution kernel (kernels/mojo_conv, ``library.CONV``)
as a graph op: the lowering (lower/conv_kernel.py) and the timing against
MAX's conv2d (kernels/conv_timing.py) build it alike."""

from __future__ import annotations

from max.graph import TensorType, TensorValue

from .library import CONV, custom

KERNEL = "torch_max_backend_tiled_conv2d"
Pair = tuple[int, int]


def tiled_conv(
    x: TensorValue, w: TensorValue, stride: Pair, dilation: Pair
) -> TensorValue:
    """Our kernel in the graph being built: ``x`` [N, H, W, C] padded
    already, ``w`` [kh, kw, C, O]; the result [N, out_h, out_w, O]."""
    (sh, sw), (dh, dw) = stride, dilation
    out_h = (x.shape[1] - (w.shape[0] - 1) * dh - 1) // sh + 1
    out_w = (x.shape[2] - (w.shape[1] - 1) * dw - 1) // sw + 1
    (y,) = custom(
        CONV,
        KERNEL,
        [x, w],
        [TensorType(x.dtype, [x.shape[0], out_h, out_w, w.shape[3]], x.device)],
        x.device,
        {"stride_h": sh, "stride_w": sw, "dilation_h": dh, "dilation_w": dw},
    )
    return y
