"""Adam's step count and bias corrections, computed by one kernel of ours.

Compiled, torch's single-tensor Adam and AdamW (torch/optim/adam.py,
capturable form) count the step and turn it into the two numbers our
``adam_step`` kernel divides by (``a`` and ``b`` in passes/adam_updates.py)::

    step'   = step + 1                     (written back into ``step``)
    size    = reciprocal(1 - beta1 ** step') * lr    (a number lr, or a
                                                      graph input's value)
            = lr / (1 - beta1 ** step')              (a tensor lr)
    a       = sqrt(1 - beta2 ** step') * -size
    b       = reciprocal(-size) * eps

Lowered op by op that is about 13 scalar ops a parameter, each number of
them a lifted graph input, and the count a graph output copied back after
the call. Where the chain is exactly this, the walk runs our
``adam_count`` kernel instead (kernels/mojo_optimizer/adam_count.mojo):
it counts in place and hands ``adam_step`` its coefficients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .findings import Coefficient, StepCount
from .update_match import (
    call,
    coefficient,
    is_input,
    is_number,
    scalar_tensor,
    write_back,
)

aten = torch.ops.aten


@dataclass(frozen=True)
class CountChain:
    """What ``counted`` found: the count, the coefficients the kernel reads
    after adam_step's first four (beta1, beta2, lr, eps), the count's
    write-back and the nodes the kernel replaces."""

    count: StepCount
    coefficients: tuple[Coefficient, ...]
    write_back: torch.fx.Node
    replaced: tuple[torch.fx.Node, ...]


def _one_minus_power(node: object) -> tuple[float, torch.fx.Node, list] | None:
    """``(beta, t, its nodes)`` of ``1 - beta ** t``."""
    if not (call(node, aten.rsub.Scalar, 2) and node.args[1] == 1):
        return None
    power = node.args[0]
    if not call(power, aten.pow.Scalar, 2) or not is_number(power.args[0]):
        return None
    return float(power.args[0]), power.args[1], [node, power]


def _step_size(
    node: object,
) -> tuple[torch.fx.Node, Coefficient, bool, list] | None:
    """``(1 - beta1 ** t, lr, lr divides, its nodes)`` of the step size."""
    if call(node, aten.div.Tensor, 2):
        lr, correction = node.args
        if isinstance(lr, torch.fx.Node) and scalar_tensor(lr):
            return correction, lr, True, [node]
        return None
    if not call(node, aten.mul.Tensor, 2):
        return None
    inverse, lr = node.args[0], coefficient(node.args[1])
    if lr is None or not call(inverse, aten.reciprocal.default, 1):
        return None
    return inverse.args[0], lr, False, [node, inverse]


def counted(a: object, b: object) -> CountChain | None:
    """The count and bias corrections whose results are ``a`` and ``b``, if
    they are torch's chain above on one step input."""
    if not (call(a, aten.mul.Tensor, 2) and call(b, aten.mul.Tensor, 2)):
        return None
    root, negative = a.args
    inverse, eps = b.args
    if not (call(root, aten.sqrt.default, 1) and call(negative, aten.neg.default, 1)):
        return None
    if not (call(inverse, aten.reciprocal.default, 1) and inverse.args[0] is negative):
        return None
    eps = coefficient(eps)
    if eps is None:
        return None
    second = _one_minus_power(root.args[0])
    size = _step_size(negative.args[0])
    if second is None or size is None:
        return None
    correction, lr, lr_divides, size_nodes = size
    first = _one_minus_power(correction)
    if first is None or first[1] is not second[1]:
        return None
    beta1, counted_step, first_nodes = first
    beta2, _, second_nodes = second
    if not (call(counted_step, aten.add.Tensor, 2) and counted_step.args[1] == 1):
        return None
    step = counted_step.args[0]
    if not (is_input(step) and scalar_tensor(step)):
        return None
    stored = write_back(step, counted_step)
    if stored is None:
        return None
    return CountChain(
        count=StepCount(step=step, lr_divides=lr_divides),
        coefficients=(beta1, beta2, lr, eps),
        write_back=stored,
        replaced=(
            a,
            b,
            root,
            negative,
            inverse,
            counted_step,
            *first_nodes,
            *second_nodes,
            *size_nodes,
        ),
    )
