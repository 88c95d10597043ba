"""Backward of pooling: the gradients training graphs keep for max/avg pooling.

Max pooling sends each output's gradient to the input position its index names:
a scatter-add into zeros (windows may overlap, so positions can collect several
gradients); 2-d float32 pooling on the CPU by our kernel (kernels/mojo_pooling),
plane by plane in torch's order. Average pooling is linear and separable (see ``pooling``): its
gradient divides by torch's divisor, then maps each spatial dim back through
the transposed 0/1 window matrix of the forward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorType, TensorValue, ops

from ...kernels.library import POOLING, custom
from ..context import current
from ..kit import all_of
from ..registry import lowering
from ..shapes import static_size
from ..windows import (
    adaptive_windows,
    avg_windows,
    compute_in,
    constant,
    contract,
    divisor_table,
    expand,
    floating_input,
    spatial,
    static_sizes,
)

aten = torch.ops.aten


# -- max pooling ------------------------------------------------------------------


def _max_pool_backward(
    grad_output: TensorValue, self: TensorValue, indices: TensorValue, n: int
) -> TensorValue:
    if n == 2 and _by_kernel(grad_output, self):
        return _planes_backward(grad_output, self, indices)
    sizes = [static_size(d) for d in self.shape]
    assert all(s is not None for s in sizes)  # guaranteed by the check
    rows = math.prod(s for s in sizes[:-n] if s is not None)
    total = math.prod(spatial(self, n))
    outputs = math.prod(spatial(grad_output, n))
    # Indices count within one (batch, channel) plane: offset them by the
    # plane's start to address the flattened input.
    offsets = np.arange(rows, dtype=np.int64)[:, None] * total
    flat_indices = ops.add(
        ops.reshape(indices, [rows, outputs]), constant(offsets, indices.dtype)
    )
    grad, _ = compute_in(grad_output)
    zeros = ops.broadcast_to(
        ops.constant(0, grad.dtype, current().device), [rows * total]
    )
    summed = ops.scatter_nd_add(
        zeros,
        ops.reshape(grad, [rows * outputs]),
        ops.reshape(flat_indices, [rows * outputs, 1]),
    )
    summed = ops.reshape(summed, self.shape)
    return (
        summed
        if summed.dtype == grad_output.dtype
        else ops.cast(summed, grad_output.dtype)
    )


def _by_kernel(grad_output: TensorValue, self: TensorValue) -> bool:
    """Whether our kernel takes this backward: float32 on the CPU (torch sums
    half-precision gradients in their own precision, our kernel in float32)."""
    return (
        grad_output.dtype == DType.float32
        and self.dtype == DType.float32
        and grad_output.device.is_cpu()
    )


def _planes_backward(
    grad_output: TensorValue, self: TensorValue, indices: TensorValue
) -> TensorValue:
    unbatched = self.rank == 3
    if unbatched:
        grad_output, indices = ops.unsqueeze(grad_output, 0), ops.unsqueeze(indices, 0)
    shape = [1, *self.shape] if unbatched else list(self.shape)
    device = current().device
    (grad,) = custom(
        POOLING,
        "torch_max_backend_max_pool2d_backward",
        [grad_output, indices],
        [TensorType(self.dtype, shape, device)],
        device,
    )
    return ops.squeeze(grad, 0) if unbatched else grad


@lowering(aten.max_pool2d_with_indices_backward.default, supports=static_sizes)
def max_pool2d_with_indices_backward(
    grad_output: TensorValue,
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
    indices: TensorValue,
) -> TensorValue:
    """max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor"""
    # The indices already encode the windows.
    return _max_pool_backward(grad_output, self, indices, 2)


@lowering(aten.max_pool3d_with_indices_backward.default, supports=static_sizes)
def max_pool3d_with_indices_backward(
    grad_output: TensorValue,
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
    indices: TensorValue,
) -> TensorValue:
    """max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor"""
    return _max_pool_backward(grad_output, self, indices, 3)


@lowering(aten.adaptive_max_pool2d_backward.default, supports=static_sizes)
def adaptive_max_pool2d_backward(
    grad_output: TensorValue, self: TensorValue, indices: TensorValue
) -> TensorValue:
    """adaptive_max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor"""
    return _max_pool_backward(grad_output, self, indices, 2)


@lowering(aten.adaptive_max_pool3d_backward.default, supports=static_sizes)
def adaptive_max_pool3d_backward(
    grad_output: TensorValue, self: TensorValue, indices: TensorValue
) -> TensorValue:
    """adaptive_max_pool3d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor"""
    return _max_pool_backward(grad_output, self, indices, 3)


# -- average pooling ----------------------------------------------------------------


def _spread(
    grad_output: TensorValue, members: Sequence[np.ndarray], divisor: np.ndarray
) -> TensorValue:
    """The transpose of ``pooling.separable_average``: each input position
    collects grad / divisor of every window it belongs to."""
    grad, dtype = compute_in(grad_output)
    grad = ops.div(grad, constant(divisor.astype(dtype), grad.dtype))
    first = grad.rank - len(members)
    for d, member in enumerate(members):
        grad = contract(grad, first + d, member.T, dtype)
    return (
        ops.cast(grad, grad_output.dtype) if grad.dtype != grad_output.dtype else grad
    )


def _avg_pool_backward(
    grad_output: TensorValue,
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    count_include_pad: bool,
    divisor_override: int | None,
    n: int,
) -> TensorValue:
    kernel = expand(kernel_size, n, kernel_size)
    windows = [
        avg_windows(i, o, k, s, p, count_include_pad)
        for i, o, k, s, p in zip(
            spatial(self, n),
            spatial(grad_output, n),
            kernel,
            expand(stride, n, kernel),
            expand(padding, n, (0,)),
            strict=True,
        )
    ]
    divisor = divisor_table([c for _, c in windows], divisor_override)
    return _spread(grad_output, [m for m, _ in windows], divisor)


_avg_supported = all_of(floating_input, static_sizes)


@lowering(aten.avg_pool2d_backward.default, supports=_avg_supported)
def avg_pool2d_backward(
    grad_output: TensorValue,
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> TensorValue:
    """avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor"""
    # ceil_mode only decided the output sizes, which grad_output has.
    return _avg_pool_backward(
        grad_output,
        self,
        kernel_size,
        stride,
        padding,
        count_include_pad,
        divisor_override,
        2,
    )


@lowering(aten.avg_pool3d_backward.default, supports=_avg_supported)
def avg_pool3d_backward(
    grad_output: TensorValue,
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> TensorValue:
    """avg_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor"""
    return _avg_pool_backward(
        grad_output,
        self,
        kernel_size,
        stride,
        padding,
        count_include_pad,
        divisor_override,
        3,
    )


def _adaptive_backward(
    grad_output: TensorValue, self: TensorValue, n: int
) -> TensorValue:
    windows = [
        adaptive_windows(i, o)
        for i, o in zip(spatial(self, n), spatial(grad_output, n), strict=True)
    ]
    divisor = divisor_table([c for _, c in windows], None)
    return _spread(grad_output, [m for m, _ in windows], divisor)


@lowering(aten._adaptive_avg_pool2d_backward.default, supports=_avg_supported)
def adaptive_avg_pool2d_backward(
    grad_output: TensorValue, self: TensorValue
) -> TensorValue:
    """_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor"""
    return _adaptive_backward(grad_output, self, 2)


@lowering(aten._adaptive_avg_pool3d_backward.default, supports=_avg_supported)
def adaptive_avg_pool3d_backward(
    grad_output: TensorValue, self: TensorValue
) -> TensorValue:
    """_adaptive_avg_pool3d_backward(Tensor grad_output, Tensor self) -> Tensor"""
    return _adaptive_backward(grad_output, self, 3)
