"""Backward ops of losses whose torch decompositions differ from eager.

torch's decomposition of ``smooth_l1_loss_backward`` tests ``|x| < beta``,
which turns a NaN input's gradient into 0; eager's kernel tests
``x <= -beta`` and ``x >= beta``, both false for a NaN, and so passes the
NaN on. A diverging model's NaN check must see it, so this is lowered as
eager computes it rather than left to the decomposition.
"""

from __future__ import annotations

import torch
from max.graph import TensorValue, ops

from ..registry import lowering
from ..scalars import Operand, as_tensor, out_max_dtype
from ..shapes import numel, size_value
from .elementwise import difference

aten = torch.ops.aten

_MEAN = 1  # torch's Reduction::Mean; None is 0 and Sum is 2


def _per_element(
    grad_output: TensorValue, x: TensorValue, reduction: int
) -> TensorValue:
    """The incoming gradient each element of ``x`` gets: divided by the
    element count for a mean."""
    if reduction != _MEAN:
        return grad_output
    count = size_value(numel(x, range(x.rank)))
    if isinstance(count, int):
        return ops.mul(grad_output, as_tensor(1.0 / count, grad_output.dtype))
    return ops.div(grad_output, as_tensor(count, grad_output.dtype))


@lowering(aten.smooth_l1_loss_backward.default)
def smooth_l1_loss_backward(
    grad_output: TensorValue,
    self: TensorValue,
    target: TensorValue,
    reduction: int,
    beta: Operand,
) -> TensorValue:
    """smooth_l1_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction, float beta) -> Tensor"""
    dt = out_max_dtype()
    x = difference(as_tensor(self, dt), as_tensor(target, dt))
    grad = _per_element(as_tensor(grad_output, dt), x, reduction)
    b = as_tensor(beta, dt)
    # Eager's order of tests: the two linear pieces first, so that with
    # beta = 0 only a NaN reaches the quadratic piece's division.
    inside = ops.div(ops.mul(x, grad), b)
    return ops.where(
        ops.greater_equal(ops.negate(b), x),
        ops.negate(grad),
        ops.where(ops.greater_equal(x, b), grad, inside),
    )
