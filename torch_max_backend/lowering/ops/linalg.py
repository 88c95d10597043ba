"""Matrix products: mm, bmm, addmm."""

from __future__ import annotations

import torch
from max.graph import TensorValue, ops

from ..registry import lowering
from ..scalars import Operand, ScalarArg, as_tensor

aten = torch.ops.aten


def _times(x: TensorValue, factor: Operand) -> TensorValue:
    if not isinstance(factor, ScalarArg) and factor == 1:
        return x
    return ops.mul(x, as_tensor(factor, x.dtype))


@lowering(aten.mm.default)
def mm(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """mm(Tensor self, Tensor mat2) -> Tensor"""
    return ops.matmul(self, mat2)


@lowering(aten.bmm.default)
def bmm(self: TensorValue, mat2: TensorValue) -> TensorValue:
    """bmm(Tensor self, Tensor mat2) -> Tensor"""
    return ops.matmul(self, mat2)


@lowering(aten.addmm.default)
def addmm(
    self: TensorValue,
    mat1: TensorValue,
    mat2: TensorValue,
    *,
    beta: Operand = 1,
    alpha: Operand = 1,
) -> TensorValue:
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"""
    product = _times(ops.matmul(mat1, mat2), alpha)
    return ops.add(_times(self, beta), product)
