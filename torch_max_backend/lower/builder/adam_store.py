"""Running one Adam or AdamW update as our in-place kernel.

The adam_updates pass (passes/adam_updates.py) finds them; the walk calls
``adam_step`` at the update's last write-back, where its tensor coefficients
(the step's bias corrections and learning rate, one element each) are built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from max.dtype import DType
from max.graph import BufferValue, TensorValue, ops

from ...kernels.library import SHIPPED, custom_in_place
from ..passes import AdamUpdate


def adam_step(
    update: AdamUpdate,
    buffers: tuple[BufferValue, BufferValue, BufferValue],
    grad: TensorValue,
    values: Mapping[torch.fx.Node, Any],
) -> None:
    """Update the parameter, exp_avg and exp_avg_sq ``buffers`` in place;
    ``values`` holds the built nodes (the coefficients that are tensors)."""
    device = grad.device
    parts = []
    for coefficient in update.coefficients:
        if isinstance(coefficient, torch.fx.Node):
            value = ops.reshape(values[coefficient], [1])
            parts.append(ops.cast(value, DType.float32))
        else:
            number = np.array([coefficient], dtype=np.float32)
            parts.append(ops.constant(number, DType.float32, device))
    custom_in_place(
        SHIPPED,
        "torch_max_backend_adam_step",
        [*buffers, grad, ops.concat(parts, axis=0)],
        device,
    )
