"""Average and adaptive average pooling over 1, 2 and 3 spatial dims.

Plain 2-d average pooling (floor mode, divisors of the whole kernel) runs on
MAX's NHWC pooling kernel; the rest is separable: a window sum is a product
with one 0/1 matrix per spatial dim (``lower/windows.py``), and torch's
divisor a product of per-dim counts or the override.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.graph import TensorValue, ops

from ..context import current
from ..kit import all_of, node_arg
from ..opmath import accumulated
from ..registry import lowering
from ..windows import (
    adaptive_windows,
    avg_windows,
    batched,
    divisor_table,
    expand,
    floating_input,
    out_spatial,
    separable_average,
    spatial,
    static_sizes,
)

aten = torch.ops.aten


def avg_pool_nd(
    x: TensorValue,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    count_include_pad: bool,
    divisor_override: int | None,
    out_sizes: Sequence[int],
) -> TensorValue:
    n = len(kernel)
    windows = [
        avg_windows(i, o, k, s, p, count_include_pad)
        for i, o, k, s, p in zip(
            spatial(x, n), out_sizes, kernel, stride, padding, strict=True
        )
    ]
    members = [m for m, _ in windows]
    return separable_average(
        x, members, divisor_table([c for _, c in windows], divisor_override)
    )


def adaptive_avg_pool_nd(x: TensorValue, out_sizes: Sequence[int]) -> TensorValue:
    n = len(out_sizes)
    windows = [
        adaptive_windows(i, o) for i, o in zip(spatial(x, n), out_sizes, strict=True)
    ]
    return separable_average(
        x, [m for m, _ in windows], divisor_table([c for _, c in windows], None)
    )


def _native_avg_pool2d(
    padding: Sequence[int] | int,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> bool:
    """Whether MAX's kernel computes torch's result. Without ``count_boundary``
    its divisors next to the padding are wrong for most strides (MAX 26.7), and
    its ceil mode is not checked against torch's rule: only floor-mode pooling
    dividing by the whole kernel (padding counted, or no padding) goes there."""
    padded = any(p != 0 for p in expand(padding, 2, (0,)))
    return (
        not ceil_mode and divisor_override is None and (count_include_pad or not padded)
    )


def _avg_pool2d_supported(node: torch.fx.Node) -> str | None:
    """Floating-point inputs (torch truncates integer averages); static sizes where MAX's kernel does not match torch's padding or ceil mode."""
    reason = floating_input(node)
    if reason is not None:
        return reason
    native = _native_avg_pool2d(
        node_arg(node, 3, "padding", (0,)),
        bool(node_arg(node, 4, "ceil_mode", False)),
        bool(node_arg(node, 5, "count_include_pad", True)),
        node_arg(node, 6, "divisor_override", None),
    )
    return None if native else static_sizes(node)


@lowering(aten.avg_pool2d.default, supports=_avg_pool2d_supported)
def avg_pool2d(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> TensorValue:
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    kernel = expand(kernel_size, 2, kernel_size)
    strides = expand(stride, 2, kernel)
    pads = expand(padding, 2, (0,))
    if not _native_avg_pool2d(pads, ceil_mode, count_include_pad, divisor_override):
        return avg_pool_nd(
            self,
            kernel,
            strides,
            pads,
            count_include_pad,
            divisor_override,
            out_spatial(2),
        )
    x, unbatched = batched(self)
    twins = current().twins  # channels-last values kept between ops

    def pool(image: TensorValue) -> TensorValue:
        return ops.avg_pool2d(
            image,
            (kernel[0], kernel[1]),
            stride=(strides[0], strides[1]),
            padding=(pads[0], pads[1]),
            # Equal to count_include_pad here, and the setting MAX gets right.
            count_boundary=True,
        )

    out = twins.channels_first(accumulated(pool, twins.channels_last(x)))
    return ops.squeeze(out, 0) if unbatched else out


_avg_pool_supported = all_of(floating_input, static_sizes)


@lowering(aten.avg_pool1d.default, supports=_avg_pool_supported)
def avg_pool1d(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> TensorValue:
    """avg_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=[0], bool ceil_mode=False, bool count_include_pad=True) -> Tensor"""
    # ceil_mode only changes the output size, read from the node's meta.
    kernel = expand(kernel_size, 1, kernel_size)
    return avg_pool_nd(
        self,
        kernel,
        expand(stride, 1, kernel),
        expand(padding, 1, (0,)),
        count_include_pad,
        None,
        out_spatial(1),
    )


@lowering(aten.avg_pool3d.default, supports=_avg_pool_supported)
def avg_pool3d(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> TensorValue:
    """avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    kernel = expand(kernel_size, 3, kernel_size)
    return avg_pool_nd(
        self,
        kernel,
        expand(stride, 3, kernel),
        expand(padding, 3, (0,)),
        count_include_pad,
        divisor_override,
        out_spatial(3),
    )


@lowering(aten.adaptive_avg_pool1d.default, supports=_avg_pool_supported)
def adaptive_avg_pool1d(self: TensorValue, output_size: Sequence[int]) -> TensorValue:
    """adaptive_avg_pool1d(Tensor self, int[1] output_size) -> Tensor"""
    return adaptive_avg_pool_nd(self, out_spatial(1))


@lowering(aten._adaptive_avg_pool2d.default, supports=_avg_pool_supported)
def adaptive_avg_pool2d(self: TensorValue, output_size: Sequence[int]) -> TensorValue:
    """_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor"""
    (h, w), (out_h, out_w) = spatial(self, 2), out_spatial(2)
    if h % out_h == 0 and w % out_w == 0:
        # Equal disjoint windows: MAX's pooling kernel is exact and faster.
        kernel = [h // out_h, w // out_w]
        return avg_pool2d(self, kernel, kernel)
    return adaptive_avg_pool_nd(self, [out_h, out_w])


@lowering(aten._adaptive_avg_pool3d.default, supports=_avg_pool_supported)
def adaptive_avg_pool3d(self: TensorValue, output_size: Sequence[int]) -> TensorValue:
    """_adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor"""
    return adaptive_avg_pool_nd(self, out_spatial(3))
