"""Float functions torch keeps as single ops outside core ATen: exp2, hypot,
fmax, fmin and round to a number of decimals.

torch's own decompositions of these end in prims no backend lowers, so a
model using one ran it in PyTorch, splitting its graph; each is composed here
from MAX's primitives with eager's results at the edges (NaN, infinities,
zeros, values whose square overflows).
"""

from __future__ import annotations

import math

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..opmath import opmath
from ..registry import lowering
from ..scalars import Operand, as_tensor, out_max_dtype, promote
from .elementwise import torch_exp

aten = torch.ops.aten


@lowering(aten.exp2.default)
def exp2(self: TensorValue) -> TensorValue:
    """exp2(Tensor self) -> Tensor"""
    dt = out_max_dtype()
    # exp(x ln 2) in the input's precision loses |x ln 2| ulps to the product's
    # rounding (4 ulps at x = 100); float64 keeps a float32 result exact.
    wide = DType.float64
    x = as_tensor(self, wide)
    return ops.cast(torch_exp(ops.mul(x, as_tensor(math.log(2), wide))), dt)


@lowering(aten.hypot.default)
@opmath
def hypot(self: TensorValue, other: TensorValue) -> TensorValue:
    """hypot(Tensor self, Tensor other) -> Tensor"""
    a, b = (ops.abs(v) for v in promote(self, other))
    dt = a.dtype
    # Scaled by the larger magnitude, so that no square overflows or underflows.
    big, small = ops.max(a, b), ops.min(a, b)
    zero, one = as_tensor(0, dt), as_tensor(1, dt)
    ratio = ops.div(small, ops.where(ops.equal(big, zero), one, big))
    scaled = ops.mul(big, ops.sqrt(ops.add(one, ops.mul(ratio, ratio))))
    either_nan = ops.logical_or(ops.is_nan(a), ops.is_nan(b))
    either_inf = ops.logical_or(ops.is_inf(a), ops.is_inf(b))
    # As C's hypot: an infinity wins over a NaN, which wins over any number.
    finite = ops.where(either_nan, as_tensor(float("nan"), dt), scaled)
    return ops.where(either_inf, as_tensor(float("inf"), dt), finite)


def _ignoring_nans(a: TensorValue, b: TensorValue, larger: bool) -> TensorValue:
    best = ops.max(a, b) if larger else ops.min(a, b)
    if not a.dtype.is_float():
        return best
    # Either operand's NaN gives the other; two NaNs give NaN.
    return ops.where(ops.is_nan(a), b, ops.where(ops.is_nan(b), a, best))


@lowering(aten.fmax.default)
def fmax(self: Operand, other: Operand) -> TensorValue:
    """fmax(Tensor self, Tensor other) -> Tensor"""
    return _ignoring_nans(*promote(self, other), larger=True)


@lowering(aten.fmin.default)
def fmin(self: Operand, other: Operand) -> TensorValue:
    """fmin(Tensor self, Tensor other) -> Tensor"""
    return _ignoring_nans(*promote(self, other), larger=False)


@lowering(aten.round.decimals)
def round_decimals(self: TensorValue, *, decimals: int) -> TensorValue:
    """round.decimals(Tensor self, *, int decimals) -> Tensor"""
    dt = self.dtype
    # Eager's order of operations: scale up for positive decimals, down for
    # the others, round half to even, then undo the scaling.
    if decimals > 0:
        scale = as_tensor(10.0**decimals, dt)
        return ops.div(ops.round(ops.mul(self, scale)), scale)
    scale = as_tensor(10.0**-decimals, dt)
    return ops.mul(ops.round(ops.div(self, scale)), scale)
