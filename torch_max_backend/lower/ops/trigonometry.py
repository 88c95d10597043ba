"""Inverse trigonometric and hyperbolic functions, composed from MAX's primitives.

MAX has sin, cos, acos, atanh, exp, log and log1p; the rest are built from
them with formulas chosen to keep float32 accuracy near zero and at large
magnitudes (log1p and expm1-like forms instead of naive ones).
"""

from __future__ import annotations

import math

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..opmath import opmath
from ..registry import lowering
from ..scalars import Operand, as_tensor, out_max_dtype
from .elementwise import accurate_expm1, keep_nan, torch_exp

aten = torch.ops.aten


def _c(value: float, like: TensorValue) -> TensorValue:
    return as_tensor(value, like.dtype)


def _in_out_dtype(x: TensorValue) -> TensorValue:
    return as_tensor(x, out_max_dtype())


def _atan(x: TensorValue) -> TensorValue:
    """atan by range reduction to |t| <= tan(pi/8) and a minimax polynomial.

    The coefficients are the classic single-precision ones (max error about
    one ulp in float32); bigger arguments are reduced with
    atan(x) = pi/2 - atan(1/x) and atan(x) = pi/4 + atan((x-1)/(x+1)).
    In float64 the polynomial's 2e-8 relative error gets one Newton step.
    """
    a = ops.abs(x)
    big = ops.greater(a, _c(2.414213562373095, x))  # tan(3pi/8)
    mid = ops.greater(a, _c(0.4142135623730950, x))  # tan(pi/8)
    one = _c(1.0, x)
    # Denominators guarded so the unused branches never divide by zero.
    safe_a = ops.where(big, a, one)
    t = ops.where(
        big,
        ops.negate(ops.div(one, safe_a)),
        ops.where(mid, ops.div(ops.sub(a, one), ops.add(a, one)), a),
    )
    base = ops.where(
        big, _c(math.pi / 2, x), ops.where(mid, _c(math.pi / 4, x), _c(0.0, x))
    )
    z = ops.mul(t, t)
    poly = _c(8.05374449538e-2, x)
    for coefficient in (-1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1):
        poly = ops.add(ops.mul(poly, z), _c(coefficient, x))
    u = ops.add(ops.mul(ops.mul(poly, z), t), t)
    if x.dtype == DType.float64:
        u = _newton_atan(u, t)
    y = ops.add(base, u)
    return ops.where(ops.greater(_c(0.0, x), x), ops.negate(y), y)


def _newton_atan(u: TensorValue, t: TensorValue) -> TensorValue:
    """A root u of tan(u) = t improved by one Newton step on
    f(u) = sin(u) - t cos(u) (f'(u) = 1 / cos(u) at the root): the error
    squares, from float32's accuracy to float64's. |t| <= tan(pi/8) here,
    so nothing overflows."""
    cos = ops.cos(u)
    return ops.sub(u, ops.mul(ops.sub(ops.sin(u), ops.mul(t, cos)), cos))


@lowering(aten.atan.default)
@opmath
def atan(self: TensorValue) -> TensorValue:
    """atan(Tensor self) -> Tensor"""
    return _atan(_in_out_dtype(self))


def _negative(x: TensorValue) -> TensorValue:
    """x < 0, counting -0.0 as negative (1 / -0.0 is -inf), as C's atan2 does."""
    zero = _c(0.0, x)
    signed_zero = ops.logical_and(
        ops.equal(x, zero), ops.greater(zero, ops.div(_c(1.0, x), x))
    )
    return ops.logical_or(ops.greater(zero, x), signed_zero)


def _atan2(y: TensorValue, x: TensorValue) -> TensorValue:
    zero = _c(0.0, x)
    x_zero = ops.equal(x, zero)
    # atan(y/x) is right for x > 0; the left half-plane is shifted by +-pi.
    base = _atan(ops.div(y, ops.where(x_zero, _c(1.0, x), x)))
    y_negative = _negative(y)
    pi = ops.where(y_negative, _c(-math.pi, x), _c(math.pi, x))
    half_pi = ops.where(y_negative, _c(-math.pi / 2, x), _c(math.pi / 2, x))
    x_negative = _negative(x)
    on_y_axis = ops.where(ops.equal(y, zero), ops.where(x_negative, pi, y), half_pi)
    # A NaN y over a zero x is NaN too (it fell to +-pi/2 above).
    on_y_axis = keep_nan(y, on_y_axis)
    result = ops.where(
        x_zero, on_y_axis, ops.where(x_negative, ops.add(base, pi), base)
    )
    # Two infinities point at a corner (y / x is NaN): +-pi/4 or +-3pi/4.
    corner = ops.where(x_negative, _c(3 * math.pi / 4, x), _c(math.pi / 4, x))
    corner = ops.where(y_negative, ops.negate(corner), corner)
    both_infinite = ops.logical_and(ops.is_inf(y), ops.is_inf(x))
    return ops.where(both_infinite, corner, result)


@lowering(aten.atan2.default)
@opmath
def atan2(self: Operand, other: Operand) -> TensorValue:
    """atan2(Tensor self, Tensor other) -> Tensor"""
    out = out_max_dtype()
    return _atan2(as_tensor(self, out), as_tensor(other, out))


@lowering(aten.atan2.out)
def atan2_out(self: Operand, other: Operand, *, out: TensorValue) -> TensorValue:
    """atan2.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    # Functionalized graphs treat the out= tensor as a fresh result.
    return atan2(self, other)


@lowering(aten.asin.default)
@opmath
def asin(self: TensorValue) -> TensorValue:
    """asin(Tensor self) -> Tensor"""
    x = _in_out_dtype(self)
    one = _c(1.0, x)
    # atan2 form keeps full precision near 0 and is exact at +-1; |x| > 1 is NaN.
    cos = ops.sqrt(ops.mul(ops.sub(one, x), ops.add(one, x)))
    return _atan2(x, cos)


@lowering(aten.acos.default)
@opmath
def acos(self: TensorValue) -> TensorValue:
    """acos(Tensor self) -> Tensor"""
    x = _in_out_dtype(self)
    # MAX's acos gives 0 for NaN and +-inf (pi for -inf); torch, NaN.
    outside = ops.logical_not(ops.greater_equal(_c(1.0, x), ops.abs(x)))
    return ops.where(outside, _c(math.nan, x), ops.acos(x))


@lowering(aten.tan.default)
@opmath
def tan(self: TensorValue) -> TensorValue:
    """tan(Tensor self) -> Tensor"""
    x = _in_out_dtype(self)
    return ops.div(ops.sin(x), ops.cos(x))


@lowering(aten.sinh.default)
@opmath
def sinh(self: TensorValue) -> TensorValue:
    """sinh(Tensor self) -> Tensor"""
    x = _in_out_dtype(self)
    half = _c(0.5, x)
    return ops.mul(ops.sub(accurate_expm1(x), accurate_expm1(ops.negate(x))), half)


@lowering(aten.cosh.default)
@opmath
def cosh(self: TensorValue) -> TensorValue:
    """cosh(Tensor self) -> Tensor"""
    x = _in_out_dtype(self)
    return ops.mul(ops.add(torch_exp(x), torch_exp(ops.negate(x))), _c(0.5, x))


@lowering(aten.asinh.default)
@opmath
def asinh(self: TensorValue) -> TensorValue:
    """asinh(Tensor self) -> Tensor"""
    x = _in_out_dtype(self)
    a = ops.abs(x)
    one = _c(1.0, x)
    # log1p(a + a^2 / (1 + sqrt(a^2 + 1))) is accurate near zero; for huge a,
    # a^2 overflows, so use log(a) + log(2) there.
    a2 = ops.mul(a, a)
    small = ops.log1p(ops.add(a, ops.div(a2, ops.add(one, ops.sqrt(ops.add(a2, one))))))
    large = ops.add(ops.log(a), _c(math.log(2.0), x))
    y = ops.where(ops.greater(a, _c(1e18, x)), large, small)
    return ops.where(ops.greater(_c(0.0, x), x), ops.negate(y), y)


@lowering(aten.acosh.default)
@opmath
def acosh(self: TensorValue) -> TensorValue:
    """acosh(Tensor self) -> Tensor"""
    x = _in_out_dtype(self)
    t = ops.sub(x, _c(1.0, x))
    small = ops.log1p(ops.add(t, ops.sqrt(ops.mul(t, ops.add(t, _c(2.0, x))))))
    large = ops.add(ops.log(x), _c(math.log(2.0), x))
    return ops.where(ops.greater(x, _c(1e18, x)), large, small)


@lowering(aten.atanh.default)
@opmath
def atanh(self: TensorValue) -> TensorValue:
    """atanh(Tensor self) -> Tensor"""
    x = _in_out_dtype(self)
    one = _c(1.0, x)
    # 0.5 * log1p(2x / (1 - x)): accurate near zero, +-inf at +-1.
    return ops.mul(
        ops.log1p(ops.div(ops.mul(_c(2.0, x), x), ops.sub(one, x))), _c(0.5, x)
    )
