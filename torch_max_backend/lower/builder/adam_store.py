"""Running one Adam or AdamW update as our in-place kernel.

The adam_updates pass (passes/adam_updates.py) finds them; the walk calls
``adam_step`` at the update's last write-back, where ``a`` and ``b`` (the
step's bias corrections and learning rate, one element each) are built.
"""

from __future__ import annotations

import numpy as np
from max.dtype import DType
from max.graph import BufferValue, TensorValue, ops

from ...kernels.library import SHIPPED, custom_in_place
from ..passes import AdamUpdate


def adam_step(
    update: AdamUpdate,
    buffers: tuple[BufferValue, BufferValue, BufferValue],
    grad: TensorValue,
    a: TensorValue,
    b: TensorValue,
) -> None:
    """Update the parameter, exp_avg and exp_avg_sq ``buffers`` in place."""
    device = grad.device
    constants = np.array(
        [update.decay, update.w1, update.beta2, update.w2], dtype=np.float32
    )
    steps = [ops.cast(ops.reshape(v, [1]), DType.float32) for v in (a, b)]
    coefficients = ops.concat(
        [ops.constant(constants, DType.float32, device), *steps], axis=0
    )
    custom_in_place(
        SHIPPED,
        "torch_max_backend_adam_step",
        [*buffers, grad, coefficients],
        device,
    )
