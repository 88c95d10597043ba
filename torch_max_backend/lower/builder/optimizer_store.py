"""Running one optimizer update as our in-place kernel.

The optimizer_updates pass (passes/optimizer_updates.py) finds them; the walk
calls ``optimizer_step`` at the update's last write-back, where its tensor
coefficients (a step's bias corrections and learning rate, one element
each) are built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from max.dtype import DType
from max.graph import BufferValue, TensorValue, ops

from ...kernels.library import SHIPPED, custom_in_place
from ..passes import OptimizerUpdate, ScalarRef

# The graph input a node's lifted number argument reads, None if not lifted.
LiftedScalar = Callable[[torch.fx.Node, int | str], TensorValue | None]


def _coefficient(
    coefficient: Any,
    values: Mapping[torch.fx.Node, Any],
    lifted: LiftedScalar,
    device: Any,
) -> TensorValue:
    """One coefficient as a one-element float32 tensor."""
    if isinstance(coefficient, torch.fx.Node):
        value = values[coefficient]
    elif isinstance(coefficient, ScalarRef):
        value = lifted(coefficient.node, coefficient.key)
        if value is None:  # not lifted: the number is the graph's own
            coefficient = _argument(coefficient)
    else:
        value = None
    if value is None:
        number = np.array([coefficient], dtype=np.float32)
        return ops.constant(number, DType.float32, device)
    return ops.cast(ops.reshape(value, [1]), DType.float32)


def _argument(ref: ScalarRef) -> float:
    node, key = ref.node, ref.key
    return float(node.args[key] if isinstance(key, int) else node.kwargs[key])


def optimizer_step(
    update: OptimizerUpdate,
    buffers: tuple[BufferValue, ...],
    grad: TensorValue,
    values: Mapping[torch.fx.Node, Any],
    lifted: LiftedScalar,
) -> None:
    """Update ``buffers`` (the parameter and its state) in place; ``values``
    holds the built nodes (the coefficients that are tensors)."""
    device = grad.device
    parts = [_coefficient(c, values, lifted, device) for c in update.coefficients]
    custom_in_place(
        SHIPPED, update.kernel, [*buffers, grad, ops.concat(parts, axis=0)], device
    )
