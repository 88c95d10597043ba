"""Running one optimizer update as our in-place kernel.

The optimizer_updates pass (passes/optimizer_updates.py) finds them; the walk
calls ``optimizer_step`` at the update's last write-back, where its tensor
coefficients (a step's bias corrections and learning rate, one element
each) are built.

An update's plain numbers (AdamW's decay ``1 - lr * weight_decay``, the
moments' weights, a learning rate, SGD's momentum and dampening) reach the
kernel as one graph input per update (``update_numbers``, fed by planning),
not as constants nor as one lifted input each: optimizers that differ only
in them build the same graph (one compile serves them, a new learning rate
included), MAX has no constants to fold at compile time, and a call passes
one input per update.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from max.dtype import DType
from max.graph import BufferValue, DeviceRef, Dim, TensorType, TensorValue, ops

from ...errors import MaxCompilerError
from ...kernels.library import OPTIMIZER, custom_in_place
from ..passes import Coefficient, OptimizerUpdate
from ..scalars import ScalarArg
from .sym_numbers import dim_operand

# Adam's step count kernel (kernels/mojo_optimizer/adam_count.mojo), and the
# coefficients it hands the update kernel: [decay, w1, beta2, w2, a, b].
COUNT_KERNEL = "torch_max_backend_adam_count"
UPDATE_COEFFICIENTS = 6


def update_numbers(update: OptimizerUpdate) -> list[float]:
    """The update's coefficients that are plain numbers of the graph (not
    tensors it computes), in the kernel's order. A number argument of a node
    the kernel replaces is one of them: planning lifts none of those."""
    return [float(c) for c in update.coefficients if _is_plain(c)]


def _is_plain(coefficient: Coefficient) -> bool:
    """Whether ``coefficient`` is one of ``update_numbers``: planning and the
    walk both ask this, so the input's numbers and the slices agree."""
    return not isinstance(coefficient, torch.fx.Node)


def _coefficients(
    update: OptimizerUpdate,
    values: Mapping[torch.fx.Node, Any],
    numbers: TensorValue | None,
    device: DeviceRef,
) -> TensorValue:
    """The kernel's coefficient vector (float32) on ``device``: tensors and
    symbolic numbers the graph computed, and runs of plain numbers sliced
    from ``numbers``."""
    parts: list[TensorValue] = []
    taken = 0  # plain numbers used so far
    run = 0  # plain numbers in the run not yet sliced
    for coefficient in update.coefficients:
        if _is_plain(coefficient):
            run += 1
            continue
        if run:
            parts.append(_sliced(numbers, taken, run))
            taken, run = taken + run, 0
        parts.append(_one_float(values[coefficient], device))
    if run:
        parts.append(_sliced(numbers, taken, run))
    return parts[0] if len(parts) == 1 else ops.concat(parts, axis=0)


def _one_float(value: Any, device: DeviceRef) -> TensorValue:
    """A coefficient the graph computes as a ``[1]`` float32 vector: a
    one-element tensor, or a symbolic number (``dynamic=True``) as a run-time
    scalar or a dim (an int that MAX's dim algebra kept)."""
    if isinstance(value, Dim):
        value = dim_operand(value, device)
    if isinstance(value, ScalarArg):
        value = value.value
    if isinstance(value, int | float):
        return ops.constant([value], DType.float32, device)
    return ops.cast(ops.reshape(value, [1]), DType.float32)


def _sliced(numbers: TensorValue | None, start: int, count: int) -> TensorValue:
    if numbers is None:
        raise MaxCompilerError("an optimizer update's numbers were not planned")
    if start == 0 and count == int(numbers.shape[0]):
        return numbers
    return ops.slice_tensor(numbers, [slice(start, start + count)])


def optimizer_step(
    update: OptimizerUpdate,
    buffers: tuple[BufferValue, ...],
    grad: TensorValue | None,
    values: Mapping[torch.fx.Node, Any],
    numbers: TensorValue | None,
) -> None:
    """Update ``buffers`` (the parameter and its state, the gradient where
    the kernel writes it, then any step count) in place, reading ``grad``
    (None where it is one of ``buffers``); ``values`` holds the built nodes
    (the coefficients that are tensors), ``numbers`` the graph input of the
    update's plain numbers (``update_numbers``)."""
    device = buffers[0].device
    coefficients = _coefficients(update, values, numbers, device)
    if update.count is not None:
        # Our count kernel adds one to the step in place and computes the
        # update kernel's bias corrections from it (passes/adam_counts.py).
        *buffers, step = buffers
        (coefficients,) = custom_in_place(
            OPTIMIZER,
            COUNT_KERNEL,
            [step, coefficients],
            device,
            parameters={"lr_divides": update.count.lr_divides},
            out_types=[TensorType(DType.float32, [UPDATE_COEFFICIENTS], device)],
        )
    # A gradient the kernel writes is one of the buffers already.
    operands = [*buffers] if update.grad_written else [*buffers, grad]
    custom_in_place(
        OPTIMIZER,
        update.kernel,
        [*operands, coefficients],
        device,
        parameters=dict(update.kernel_parameters),
    )
