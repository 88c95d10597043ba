"""Max pooling over 1, 2 and 3 spatial dims.

Plain 2-d max pooling (floor mode, indices unused) runs on MAX's NHWC
pooling kernel, with NaNs put back, which MAX's kernel skips. With its
indices (a training step's) on the CPU it runs on our kernel
(kernels/mojo_pooling), which returns them too. The rest gathers windows
through a table of input positions (``lower/windows.py``). Values and
indices are torch's exactly: the first maximum in window order, or the last
NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from max.dtype import DType
from max.graph import Dim, TensorType, TensorValue, ops

from ...dtypes import to_torch_dtype
from ...kernels.library import POOLING, custom
from ..context import current
from ..kit import arg_meta, node_arg
from ..registry import SupportsFn, lowering
from ..windows import (
    adaptive_max_table,
    batched,
    constant,
    expand,
    indices_used,
    max_pool_table,
    out_spatial,
    spatial,
    static_sizes,
    window_parameters,
)

aten = torch.ops.aten


def _lowest(dtype: DType) -> float | int:
    torch_dtype = to_torch_dtype(dtype)
    if torch_dtype.is_floating_point:
        return -math.inf
    return int(torch.iinfo(torch_dtype).min)


def _nan(dtype: DType) -> TensorValue:
    return ops.constant(math.nan, dtype, current().device)


def max_pool_nd(
    x: TensorValue,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> tuple[TensorValue, TensorValue]:
    """torch's max pooling over the last ``len(kernel)`` dims: values, indices."""
    n = len(kernel)
    in_sizes, out_sizes = spatial(x, n), out_spatial(n)
    table = max_pool_table(in_sizes, out_sizes, kernel, stride, padding, dilation)
    return _max_over_windows(x, table, in_sizes, out_sizes)


def _max_over_windows(
    x: TensorValue,
    table: np.ndarray,
    in_sizes: Sequence[int],
    out_sizes: Sequence[int],
) -> tuple[TensorValue, TensorValue]:
    """The maximum of each window of ``table`` (``max_pool_table``'s form)
    over the last ``len(in_sizes)`` dims of ``x``: values, flat indices."""
    n = len(in_sizes)
    lead: list[Dim] = list(x.shape)[:-n]
    total = math.prod(in_sizes)
    flat = ops.reshape(x, [*lead, total])
    # [*lead, kernel, outputs]; padding slots read position 0, masked below.
    windows = ops.gather(flat, constant(np.maximum(table, 0), DType.int64), len(lead))
    positions = constant(table, DType.int64)
    # Computed here: a comparison of two constants is left to MAX to fold at
    # compile time, which costs it a kernel compile.
    valid = constant(table >= 0, DType.bool)
    lowest = ops.constant(_lowest(x.dtype), x.dtype, current().device)
    masked = ops.where(valid, windows, lowest)
    best = ops.max(masked, axis=-2)
    is_best = ops.logical_and(valid, ops.equal(masked, best))
    beyond = constant(np.array(total, np.int64), DType.int64)
    index = ops.min(ops.where(is_best, positions, beyond), axis=-2)
    # MAX's max reduction starts from the lowest finite value, so a window of
    # -inf reduces to that and matches no element: it is -inf, and torch's
    # index is then the window's first position.
    unmatched = ops.equal(index, beyond)
    first = np.where(table >= 0, table, total).min(axis=0)
    best = ops.where(unmatched, lowest, best)
    index = ops.where(unmatched, constant(first, DType.int64), index)
    if x.dtype.is_float():
        # The reduction also skips NaNs, but torch's kernel takes a NaN
        # whatever it follows: the window is NaN, at its last NaN.
        nan = ops.logical_and(valid, ops.is_nan(windows))
        none = constant(np.array(-1, np.int64), DType.int64)
        last_nan = ops.max(ops.where(nan, positions, none), axis=-2)
        has_nan = ops.greater_equal(
            last_nan, constant(np.array(0, np.int64), DType.int64)
        )
        index = ops.where(has_nan, last_nan, index)
        best = ops.where(has_nan, _nan(x.dtype), best)
    out_shape = [*lead, *out_sizes]
    return ops.reshape(best, out_shape), ops.reshape(index, out_shape)


def _max_pool_supported(n: int) -> SupportsFn:
    def check(node: torch.fx.Node) -> str | None:
        """Non-bool inputs; static sizes for ceil mode, used indices or 3-d windows."""
        meta = arg_meta(node, 0)
        if meta is not None and meta.dtype == torch.bool:
            return "max pooling of bool tensors"
        ceil_mode = node_arg(node, 5, "ceil_mode", False)
        if n == 2 and not ceil_mode and not indices_used(node):
            return None  # MAX's kernel takes symbolic sizes too
        return static_sizes(node)

    return check


@lowering(aten.max_pool2d_with_indices.default, supports=_max_pool_supported(2))
def max_pool2d_with_indices(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[TensorValue, TensorValue]:
    """max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""
    kernel = expand(kernel_size, 2, kernel_size)
    strides = expand(stride, 2, kernel)
    pads = expand(padding, 2, (0,))
    dilations = expand(dilation, 2, (1,))
    # MAX's kernel is faster but has no indices, and its ceil mode is not
    # checked against torch's rule: only floor-mode values go there. With
    # indices, floor-mode float pooling on the CPU is our kernel's.
    with_indices = indices_used(current().node)
    if (
        with_indices
        and not ceil_mode
        and self.dtype.is_float()
        and self.device.is_cpu()
    ):
        return _pooled_with_indices(self, kernel, strides, pads, dilations)
    if ceil_mode or with_indices:
        return max_pool_nd(self, kernel, strides, pads, dilations)
    x, unbatched = batched(self)

    def pool(t: TensorValue) -> TensorValue:
        return ops.max_pool2d(
            t,
            (kernel[0], kernel[1]),
            stride=(strides[0], strides[1]),
            dilation=(dilations[0], dilations[1]),
            padding=(pads[0], pads[1]),
        )

    twins = current().twins  # channels-last values kept between ops
    nhwc = twins.channels_last(x)
    out = pool(nhwc)
    if x.dtype.is_float():
        # MAX's kernel skips NaNs; torch's window is NaN if it holds one.
        has_nan = pool(ops.cast(ops.is_nan(nhwc), x.dtype))
        zero = ops.constant(0, x.dtype, current().device)
        out = ops.where(ops.greater(has_nan, zero), _nan(x.dtype), out)
    out = twins.channels_first(out)
    if unbatched:
        out = ops.squeeze(out, 0)
    # Nothing reads the indices (checked above), so no value stands for them.
    return out, out


def _pooled_with_indices(
    self: TensorValue,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> tuple[TensorValue, TensorValue]:
    """Floor-mode 2-d max pooling of a float tensor on the CPU by our kernel:
    the windows read channels-last, the values kept as the result's
    channels-last twin, the indices written channels-first."""
    x, unbatched = batched(self)
    twins = current().twins
    nhwc = twins.channels_last(x)
    n, c = nhwc.shape[0], nhwc.shape[3]
    out_h, out_w = out_spatial(2)
    device = current().device
    values, indices = custom(
        POOLING,
        "torch_max_backend_max_pool2d",
        [nhwc],
        [
            TensorType(x.dtype, [n, out_h, out_w, c], device),
            TensorType(DType.int64, [n, c, out_h, out_w], device),
        ],
        device,
        parameters=window_parameters(kernel, stride, padding, dilation),
    )
    out = twins.channels_first(values)
    if unbatched:
        return ops.squeeze(out, 0), ops.squeeze(indices, 0)
    return out, indices


@lowering(aten.max_pool3d_with_indices.default, supports=_max_pool_supported(3))
def max_pool3d_with_indices(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[TensorValue, TensorValue]:
    """max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""
    # ceil_mode only changes the output sizes, read from the node's meta.
    kernel = expand(kernel_size, 3, kernel_size)
    return max_pool_nd(
        self,
        kernel,
        expand(stride, 3, kernel),
        expand(padding, 3, (0,)),
        expand(dilation, 3, (1,)),
    )


def _adaptive_max_supported(node: torch.fx.Node) -> str | None:
    """Non-bool inputs of static sizes."""
    meta = arg_meta(node, 0)
    if meta is not None and meta.dtype == torch.bool:
        return "max pooling of bool tensors"
    return static_sizes(node)


def _adaptive_max_pool(
    self: TensorValue, output_size: Sequence[int]
) -> tuple[TensorValue, TensorValue]:
    n = len(output_size)
    in_sizes, out_sizes = spatial(self, n), out_spatial(n)
    table = adaptive_max_table(in_sizes, out_sizes)
    return _max_over_windows(self, table, in_sizes, out_sizes)


@lowering(aten.adaptive_max_pool2d.default, supports=_adaptive_max_supported)
def adaptive_max_pool2d(
    self: TensorValue, output_size: Sequence[int]
) -> tuple[TensorValue, TensorValue]:
    """adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)"""
    # Any windows, not only the global and evenly dividing ones torch's
    # decomposition takes (the others ran in PyTorch).
    return _adaptive_max_pool(self, output_size)


@lowering(aten.adaptive_max_pool3d.default, supports=_adaptive_max_supported)
def adaptive_max_pool3d(
    self: TensorValue, output_size: Sequence[int]
) -> tuple[TensorValue, TensorValue]:
    """adaptive_max_pool3d(Tensor self, int[3] output_size) -> (Tensor, Tensor)"""
    return _adaptive_max_pool(self, output_size)
