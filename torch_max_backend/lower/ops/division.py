"""Division: true division, floor and trunc modes, remainder and fmod.

Integer divisions refuse a zero divisor at run time (eager raises
ZeroDivisionError; x86 traps) and divide by -1 as a negation (x86 traps on
the smallest value over -1 too, killing the process; eager wraps). Float
remainders are computed as eager's are, from an exact fmod:
``a - floor(a / b) * b`` in the operands' precision rounds the quotient
(100 % 0.1 gave 0, eager 0.0999985) and makes NaN of an infinite divisor
(-10 % inf is inf in eager, as in Python).
"""

from __future__ import annotations

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..checks import nonzero_divisor
from ..opmath import opmath
from ..registry import lowering
from ..scalars import Operand, as_tensor, out_max_dtype, promote

aten = torch.ops.aten


@lowering(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor)
@opmath
def div(self: Operand, other: Operand) -> TensorValue:
    """div.Tensor(Tensor self, Tensor other) -> Tensor
    div.Scalar(Tensor self, Scalar other) -> Tensor
    true_divide.Tensor(Tensor self, Tensor other) -> Tensor
    """
    out = out_max_dtype()  # true division: integers promote to float
    return ops.div(as_tensor(self, out), as_tensor(other, out))


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(
    self: Operand, other: Operand, *, rounding_mode: str | None
) -> TensorValue:
    """div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor
    div.Scalar_mode(Tensor self, Scalar other, *, str? rounding_mode) -> Tensor
    """
    if rounding_mode is None:
        return div(self, other)
    a, b = promote(self, other)
    if a.dtype.is_float() and rounding_mode == "floor":
        return ops.cast(_float_floor_div(a, b), a.dtype)
    if a.dtype.is_float():
        # As eager: the quotient rounded to the operands' dtype, truncated
        # (2 / 0.668 in bfloat16 is 3.0, truncated 3).
        return ops.trunc(ops.div(a, b))
    b, minus_one = _divisor(b, other)
    if rounding_mode == "floor":
        return _negated_where(minus_one, a, ops.floor_div(a, b))
    return _negated_where(minus_one, a, _trunc_div(a, b))


def _divisor(b: TensorValue, other: Operand) -> tuple[TensorValue, TensorValue | bool]:
    """An integer divisor with its zeros refused and its -1s made 1, and where
    it was -1 (a bool for a literal or an unsigned dtype). Anything divided
    by 1 leaves no remainder, as by -1."""
    b = nonzero_divisor(b, other)
    if isinstance(other, (int, float)):
        return (as_tensor(1, b.dtype) if other == -1 else b), other == -1
    if not b.dtype.is_signed_integral():  # unsigned and bool: no -1
        return b, False
    minus_one = ops.equal(b, as_tensor(-1, b.dtype))
    return ops.where(minus_one, as_tensor(1, b.dtype), b), minus_one


def _negated_where(
    minus_one: TensorValue | bool, a: TensorValue, quotient: TensorValue
) -> TensorValue:
    """``quotient``, with ``-a`` where the divisor was -1 (wrapping around for
    the smallest value, as eager)."""
    if minus_one is False:
        return quotient
    negated = ops.sub(as_tensor(0, a.dtype), a)
    return negated if minus_one is True else ops.where(minus_one, negated, quotient)


def _float_fmod(a: TensorValue, b: TensorValue) -> TensorValue:
    """C's fmod of float ``a`` and ``b``, in float64: the result has the sign
    of ``a`` and is smaller than ``b`` in magnitude. Exact for float32 and
    half-precision operands whose quotient is below 2^29 (the product of the
    truncated quotient and ``b`` then fits float64's 53 bits); float64
    operands get the same steps in their own precision."""
    wide = DType.float64
    a, b = ops.cast(a, wide), ops.cast(b, wide)
    zero = as_tensor(0, wide)
    q = ops.trunc(ops.div(a, b))
    # A zero quotient leaves ``a`` as it is (an infinite divisor: 0 * inf
    # would be NaN).
    r = ops.where(ops.equal(q, zero), a, ops.sub(a, ops.mul(q, b)))
    # The quotient's rounding can leave the result one divisor out of range.
    size = ops.abs(b)
    r = ops.where(
        ops.logical_and(ops.greater(a, zero), ops.greater(zero, r)), ops.add(r, size), r
    )
    r = ops.where(
        ops.logical_and(ops.greater(zero, a), ops.greater(r, zero)), ops.sub(r, size), r
    )
    over = ops.greater_equal(ops.abs(r), size)
    toward_zero = ops.where(ops.greater(r, zero), ops.sub(r, size), ops.add(r, size))
    return ops.where(over, toward_zero, r)


def _off_sign(mod: TensorValue, b: TensorValue) -> TensorValue:
    """Where fmod's ``mod`` is nonzero with a sign other than the divisor's:
    Python's remainder adds ``b`` there, its floor division steps down."""
    zero = as_tensor(0, mod.dtype)
    signs_differ = ops.not_equal(ops.greater(zero, b), ops.greater(zero, mod))
    return ops.logical_and(ops.not_equal(mod, zero), signs_differ)


def _float_floor_div(a: TensorValue, b: TensorValue) -> TensorValue:
    """Python's float floor division, as eager computes it (in float64): the
    quotient of ``a`` less its exact remainder, so that 1 // 0.1 is 9, where
    flooring the rounded quotient 10.0 gives 10."""
    wide = DType.float64
    a, b = ops.cast(a, wide), ops.cast(b, wide)
    zero = as_tensor(0, wide)
    quotient = ops.div(a, b)
    mod = _float_fmod(a, b)
    div = ops.div(ops.sub(a, mod), b)
    div = ops.where(_off_sign(mod, b), ops.sub(div, as_tensor(1, wide)), div)
    floored = ops.floor(div)
    rounded_up = ops.greater(ops.sub(div, floored), as_tensor(0.5, wide))
    floored = ops.where(rounded_up, ops.add(floored, as_tensor(1, wide)), floored)
    # A zero quotient keeps its sign (trunc of a quotient below 1 in size);
    # a zero divisor gives the true quotient: infinities or NaN.
    floored = ops.where(ops.equal(div, zero), ops.trunc(quotient), floored)
    return ops.where(ops.equal(b, zero), quotient, floored)


@lowering(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(self: Operand, other: Operand) -> TensorValue:
    """remainder.Tensor(Tensor self, Tensor other) -> Tensor
    remainder.Scalar(Tensor self, Scalar other) -> Tensor
    remainder.Scalar_Tensor(Scalar self, Tensor other) -> Tensor
    """
    a, b = promote(self, other)
    # Python semantics: the result takes the sign of the divisor.
    if a.dtype.is_float():
        r = _float_fmod(a, b)
        wide_b = ops.cast(b, r.dtype)
        shift = _off_sign(r, wide_b)
        return ops.cast(ops.where(shift, ops.add(r, wide_b), r), a.dtype)
    b, _ = _divisor(b, other)
    return ops.sub(a, ops.mul(ops.floor_div(a, b), b))


def _trunc_div(a: TensorValue, b: TensorValue) -> TensorValue:
    """Integer division rounding towards zero, as C and torch's trunc mode do."""
    floor_q = ops.floor_div(a, b)
    # Floor division steps down for negative inexact quotients: step back up.
    inexact = ops.not_equal(ops.mul(floor_q, b), a)
    zero = as_tensor(0, a.dtype)
    negative = ops.logical_xor(ops.greater(zero, a), ops.greater(zero, b))
    one = as_tensor(1, a.dtype)
    return ops.where(ops.logical_and(inexact, negative), ops.add(floor_q, one), floor_q)


@lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(self: Operand, other: Operand) -> TensorValue:
    """fmod.Tensor(Tensor self, Tensor other) -> Tensor
    fmod.Scalar(Tensor self, Scalar other) -> Tensor
    """
    a, b = promote(self, other)
    # C semantics: the result takes the sign of the dividend.
    if a.dtype.is_float():
        return ops.cast(_float_fmod(a, b), a.dtype)
    b, _ = _divisor(b, other)
    return ops.sub(a, ops.mul(_trunc_div(a, b), b))
