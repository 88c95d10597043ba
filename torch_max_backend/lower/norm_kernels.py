"""A training layer norm, forward and backward, as kernels of ours on the CPU.

Composed from MAX ops, a layer norm whose statistics are read (a training
graph saves them for the backward) is two reductions per row and the
elementwise work around them, and its backward four reductions (two means
per row, two sums over the rows), each a kernel MAX compiles on its own:
kernels/mojo/layer_norm.mojo and layer_norm_backward.mojo do each in one
kernel over the rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from max.dtype import DType
from max.graph import Dim, TensorType, TensorValue, ops

from ..kernels.library import SHIPPED, custom
from .context import current


def layer_norm_rows(
    x: TensorValue, weight: TensorValue, bias: TensorValue, eps: float
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """The normalized rows of ``x`` [R, D] with their mean and rstd [R], from
    one kernel of ours (kernels/mojo/layer_norm.mojo); all float32, ``weight``
    and ``bias`` [D]."""
    device = current().device
    f32 = DType.float32
    epsilon = ops.constant(np.array([eps], np.float32), f32, device=device)
    vector = TensorType(f32, [x.shape[0]], device)
    out, mean, rstd = custom(
        SHIPPED,
        "torch_max_backend_layer_norm",
        [x, weight, bias, epsilon],
        [TensorType(f32, list(x.shape), device), vector, vector],
        device,
    )
    return out, mean, rstd


def layer_norm_grads(
    grad_out: TensorValue,
    input: TensorValue,
    normalized_shape: Sequence[int | Dim],
    mean: TensorValue,
    rstd: TensorValue,
    weight: TensorValue | None,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """The input's, weight's and bias's gradients from one kernel of ours
    (kernels/mojo/layer_norm_backward.mojo), over [rows, D] in float32:
    composed, they are four MAX reductions and the work between them."""
    width = int(np.prod([int(d) for d in normalized_shape]))
    device = current().device
    f32 = DType.float32

    def rows(x: TensorValue, last: int | Dim) -> TensorValue:
        x = ops.reshape(x, [-1, last])
        return x if x.dtype == f32 else ops.cast(x, f32)

    if weight is None:
        w = ops.constant(np.ones((width,), np.float32), f32, device=device)
    else:
        w = ops.reshape(rows(weight, width), [width])
    x = rows(input, width)
    vector = TensorType(f32, [width], device)
    grad_rows, grad_weight, grad_bias = custom(
        SHIPPED,
        "torch_max_backend_layer_norm_backward",
        [
            rows(grad_out, width),
            x,
            ops.reshape(rows(mean, 1), [-1]),
            ops.reshape(rows(rstd, 1), [-1]),
            w,
        ],
        [TensorType(f32, list(x.shape), device), vector, vector],
        device,
    )
    shape = list(normalized_shape)
    return (
        ops.reshape(grad_rows, list(input.shape)),
        ops.reshape(grad_weight, shape),
        ops.reshape(grad_bias, shape),
    )
