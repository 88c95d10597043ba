"""Running one optimizer update as our in-place kernel.

The optimizer_updates pass (passes/optimizer_updates.py) finds them; the walk
calls ``optimizer_step`` at the update's last write-back, where its tensor
coefficients (a step's bias corrections and learning rate, one element
each) are built.

An update's plain numbers (AdamW's decay ``1 - lr * weight_decay``, the
moments' weights, SGD's dampening) reach the kernel as one graph input per
update (``update_numbers``, fed by planning), not as constants: optimizers
that differ only in them build the same graph (one compile serves them),
and MAX has no constants to fold at compile time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from max.dtype import DType
from max.graph import BufferValue, TensorValue, ops

from ...errors import MaxCompilerError
from ...kernels.library import SHIPPED, custom_in_place
from ..passes import Coefficient, OptimizerUpdate, ScalarRef

# The graph input a node's lifted number argument reads, None if not lifted.
LiftedScalar = Callable[[torch.fx.Node, int | str], TensorValue | None]


def update_numbers(
    update: OptimizerUpdate, is_lifted: Callable[[ScalarRef], bool]
) -> list[float]:
    """The update's coefficients that are plain numbers of the graph (not
    tensors it computes, not lifted scalars), in the kernel's order."""
    return [_number(c) for c in update.coefficients if _is_plain(c, is_lifted)]


def _is_plain(coefficient: Coefficient, is_lifted: Callable[[ScalarRef], bool]) -> bool:
    """Whether ``coefficient`` is one of ``update_numbers``: planning and the
    walk both ask this, so the input's numbers and the slices agree."""
    if isinstance(coefficient, torch.fx.Node):
        return False
    return not (isinstance(coefficient, ScalarRef) and is_lifted(coefficient))


def _number(coefficient: Coefficient) -> float:
    if isinstance(coefficient, ScalarRef):
        node, key = coefficient.node, coefficient.key
        return float(node.args[key] if isinstance(key, int) else node.kwargs[key])
    return float(coefficient)


def _coefficients(
    update: OptimizerUpdate,
    values: Mapping[torch.fx.Node, Any],
    lifted: LiftedScalar,
    numbers: TensorValue | None,
) -> TensorValue:
    """The kernel's coefficient vector (float32): tensors the graph computed,
    lifted scalars, and runs of plain numbers sliced from ``numbers``."""
    parts: list[TensorValue] = []
    taken = 0  # plain numbers used so far
    run = 0  # plain numbers in the run not yet sliced

    def is_lifted(ref: ScalarRef) -> bool:
        return lifted(ref.node, ref.key) is not None

    for coefficient in update.coefficients:
        if _is_plain(coefficient, is_lifted):
            run += 1
            continue
        if run:
            parts.append(_sliced(numbers, taken, run))
            taken, run = taken + run, 0
        if isinstance(coefficient, torch.fx.Node):
            value = values[coefficient]
        else:
            value = lifted(coefficient.node, coefficient.key)
        parts.append(ops.cast(ops.reshape(value, [1]), DType.float32))
    if run:
        parts.append(_sliced(numbers, taken, run))
    return parts[0] if len(parts) == 1 else ops.concat(parts, axis=0)


def _sliced(numbers: TensorValue | None, start: int, count: int) -> TensorValue:
    if numbers is None:
        raise MaxCompilerError("an optimizer update's numbers were not planned")
    if start == 0 and count == int(numbers.shape[0]):
        return numbers
    return ops.slice_tensor(numbers, [slice(start, start + count)])


def optimizer_step(
    update: OptimizerUpdate,
    buffers: tuple[BufferValue, ...],
    grad: TensorValue,
    values: Mapping[torch.fx.Node, Any],
    lifted: LiftedScalar,
    numbers: TensorValue | None,
) -> None:
    """Update ``buffers`` (the parameter and its state) in place; ``values``
    holds the built nodes (the coefficients that are tensors), ``numbers``
    the graph input of the update's plain numbers (``update_numbers``)."""
    coefficients = _coefficients(update, values, lifted, numbers)
    custom_in_place(SHIPPED, update.kernel, [*buffers, grad, coefficients], grad.device)
