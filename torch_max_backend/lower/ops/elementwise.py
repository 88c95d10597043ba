"""Elementwise arithmetic and math (comparisons and logic are in ``logic``).

Type promotion and Python scalars go through ``promote``/``as_tensor`` so that
every op follows torch's rules the same way; MAX broadcasts operands itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch._inductor.inductor_prims  # defines prims.fma, lowered below
from max.dtype import DType
from max.graph import TensorValue, ops

from ...dtypes import to_torch_dtype
from ...errors import UnsupportedCase
from ..opmath import opmath
from ..registry import lowering
from ..scalars import Operand, ScalarArg, as_tensor, out_max_dtype, promote

aten = torch.ops.aten
prims = torch.ops.prims


def _is_one(x: Operand) -> bool:
    return not isinstance(x, (TensorValue, ScalarArg)) and x == 1


def _scaled(x: TensorValue, alpha: Operand) -> TensorValue:
    return x if _is_one(alpha) else ops.mul(x, as_tensor(alpha, x.dtype))


# -- arithmetic ----------------------------------------------------------------
# Half-precision operands are added and multiplied in float32 and rounded
# once (``opmath``), as torch's kernels do: an add with alpha had rounded
# twice, and MAX's own bfloat16 multiply ran at its slow cast's rate on the
# CPU (docs/benchmarks.md, half-precision elementwise work).


@lowering(aten.add.Tensor, aten.add.Scalar)
@opmath
def add(self: Operand, other: Operand, alpha: Operand = 1) -> TensorValue:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
    add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor
    """
    a, b = promote(self, other)
    if a.dtype == DType.bool:
        return ops.logical_or(a, b)
    return ops.add(a, _scaled(b, alpha))


@lowering(aten.sub.Tensor, aten.sub.Scalar)
@opmath
def sub(self: Operand, other: Operand, alpha: Operand = 1) -> TensorValue:
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
    sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor
    """
    a, b = promote(self, other)
    return difference(a, _scaled(b, alpha))


@lowering(aten.rsub.Scalar, aten.rsub.Tensor)
@opmath
def rsub(self: Operand, other: Operand, alpha: Operand = 1) -> TensorValue:
    """rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor
    rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
    """
    a, b = promote(self, other)
    return difference(b, _scaled(a, alpha))


def difference(a: TensorValue, b: TensorValue) -> TensorValue:
    """a - b. MAX simplifies a value minus itself to 0, where torch gives
    NaN for a NaN or an infinity (``x - x.detach()`` is one such pair)."""
    if a.to_mlir() != b.to_mlir() or not a.dtype.is_float():
        return ops.sub(a, b)
    finite = ops.logical_not(ops.logical_or(ops.is_nan(a), ops.is_inf(a)))
    zero, nan = as_tensor(0, a.dtype), as_tensor(float("nan"), a.dtype)
    return ops.where(finite, zero, nan)


@lowering(aten.mul.Tensor, aten.mul.Scalar)
@opmath
def mul(self: Operand, other: Operand) -> TensorValue:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor
    mul.Scalar(Tensor self, Scalar other) -> Tensor
    """
    a, b = promote(self, other)
    if a.dtype == DType.bool:
        return ops.logical_and(a, b)
    return ops.mul(a, b)


@lowering(prims.fma.default)
@opmath
def fma(a: Operand, b: Operand, c: Operand) -> TensorValue:
    """prims::fma(Tensor a, Tensor b, Tensor c) -> Tensor"""
    # Dynamo emits it for in-place updates with a tensor scale, such as an
    # optimizer's ``param.add_(grad, alpha=-lr)`` when lr is a tensor.
    x, y, z = promote(a, b, c)
    return ops.add(ops.mul(x, y), z)


@lowering(aten.neg.default)
def neg(self: TensorValue) -> TensorValue:
    """neg(Tensor self) -> Tensor"""
    if self.dtype.is_unsigned_integral():
        # MAX negates signed values only (and turns 0 - x into a negation):
        # (largest - x) + 1 wraps around to torch's 2^bits - x.
        largest = as_tensor(torch.iinfo(to_torch_dtype(self.dtype)).max, self.dtype)
        return ops.add(ops.sub(largest, self), as_tensor(1, self.dtype))
    return ops.negate(self)


def keep_nan(x: TensorValue, result: TensorValue) -> TensorValue:
    """``result`` with ``x``'s NaNs where ``x`` holds them. MAX's elementwise
    max, min and relu give the other operand for a NaN; torch gives the NaN,
    and a NaN turned into a number hides a diverging model."""
    if not x.dtype.is_float():
        return result
    return ops.where(ops.is_nan(x), x, result)


def torch_exp(x: TensorValue) -> TensorValue:
    """exp, NaN for NaN: MAX's exp gives inf."""
    return keep_nan(x, ops.exp(x))


def torch_tanh(x: TensorValue) -> TensorValue:
    """tanh, NaN for NaN: MAX's tanh gives 1."""
    return keep_nan(x, ops.tanh(x))


def torch_sigmoid(x: TensorValue) -> TensorValue:
    """sigmoid, NaN for NaN: MAX's sigmoid gives 0."""
    return keep_nan(x, ops.sigmoid(x))


def torch_maximum(a: TensorValue, b: TensorValue) -> TensorValue:
    """The larger of ``a`` and ``b`` (one dtype), NaN where either is."""
    return keep_nan(a, keep_nan(b, ops._elementwise_max(a, b)))


def torch_minimum(a: TensorValue, b: TensorValue) -> TensorValue:
    """The smaller of ``a`` and ``b`` (one dtype), NaN where either is."""
    return keep_nan(a, keep_nan(b, ops._elementwise_min(a, b)))


def _bounded(x: TensorValue, bound: Operand, pick: Callable) -> TensorValue:
    b = as_tensor(bound, x.dtype)
    out = keep_nan(x, pick(x, b))
    # A number bound is a constant: a NaN test of it would be MAX's to fold.
    return out if isinstance(bound, bool | int | float) else keep_nan(b, out)


def at_least(x: TensorValue, bound: Operand) -> TensorValue:
    """``max(x, bound)`` as torch's clamp: NaN where ``x`` or a tensor bound is."""
    return _bounded(x, bound, ops._elementwise_max)


def at_most(x: TensorValue, bound: Operand) -> TensorValue:
    """``min(x, bound)`` as torch's clamp: NaN where ``x`` or a tensor bound is."""
    return _bounded(x, bound, ops._elementwise_min)


@lowering(aten.maximum.default)
def maximum(self: TensorValue, other: TensorValue) -> TensorValue:
    """maximum(Tensor self, Tensor other) -> Tensor"""
    return torch_maximum(*promote(self, other))


@lowering(aten.minimum.default)
def minimum(self: TensorValue, other: TensorValue) -> TensorValue:
    """minimum(Tensor self, Tensor other) -> Tensor"""
    return torch_minimum(*promote(self, other))


@lowering(aten.clamp.default, aten.clamp.Tensor)
def clamp(
    self: TensorValue, min: Operand | None = None, max: Operand | None = None
) -> TensorValue:
    """clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor
    clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor
    """
    out = out_max_dtype()
    x = as_tensor(self, out)
    if min is not None:
        x = at_least(x, min)
    if max is not None:
        x = at_most(x, max)
    return x


def _integral_power(x: TensorValue, n: int) -> TensorValue:
    # Exact like torch for small integer powers, also for negative bases.
    result = x
    for _ in range(abs(n) - 1):
        result = ops.mul(result, x)
    return ops.div(as_tensor(1, x.dtype), result) if n < 0 else result


def _power_known_at_run_time(x: TensorValue, exponent: ScalarArg) -> TensorValue:
    """``x ** n`` for a float ``x`` and a number ``n`` known only at run time
    (an int argument that changes between calls), as torch's ``pow``: an
    integral exponent keeps the sign of an odd power of a negative base, any
    other gives NaN there, and ``x ** 0`` is 1."""
    if not x.dtype.is_float():
        raise UnsupportedCase("an integer tensor raised to a run-time power")
    e = ops.cast(exponent.value, DType.float64)
    magnitude = ops.cast(ops.pow(ops.cast(ops.abs(x), DType.float64), e), x.dtype)
    integral = ops.equal(ops.floor(e), e)
    halved = ops.div(e, as_tensor(2, DType.float64))
    odd = ops.logical_and(integral, ops.not_equal(ops.floor(halved), halved))
    negative = ops.greater(as_tensor(0, x.dtype), x)
    signed = ops.where(odd, ops.negate(magnitude), magnitude)
    nan = as_tensor(math.nan, x.dtype)
    result = ops.where(negative, ops.where(integral, signed, nan), magnitude)
    one = as_tensor(1, x.dtype)
    return ops.where(ops.equal(e, as_tensor(0, DType.float64)), one, result)


@lowering(aten.pow.Tensor_Scalar, lift_scalars=False)
@opmath
def pow_tensor_scalar(
    self: TensorValue, exponent: float | int | bool | ScalarArg
) -> TensorValue:
    """pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor"""
    x = as_tensor(self, out_max_dtype())
    if isinstance(exponent, ScalarArg):
        return _power_known_at_run_time(x, exponent)
    e = float(exponent)
    if e == 0:
        return ops.broadcast_to(as_tensor(1, x.dtype), x.shape)
    if e.is_integer() and abs(e) <= 8:
        return _integral_power(x, int(e))
    if e == 0.5:
        return ops.sqrt(x)
    if e == -0.5:
        return ops.rsqrt(x)
    if e.is_integer():
        # |x|^n carries the sign of x for odd n.
        magnitude = ops.pow(ops.abs(x), as_tensor(e, x.dtype))
        if int(e) % 2 == 0:
            return magnitude
        return ops.where(ops.greater(0, x), ops.negate(magnitude), magnitude)
    return ops.pow(x, as_tensor(e, x.dtype))


@lowering(aten.pow.Tensor_Tensor, aten.pow.Scalar)
@opmath
def pow_tensor(self: Operand, exponent: Operand) -> TensorValue:
    """pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor
    pow.Scalar(Scalar self, Tensor exponent) -> Tensor
    """
    out = out_max_dtype()
    return ops.pow(as_tensor(self, out), as_tensor(exponent, out))


# -- unary math: in the output dtype (integers promote to float, halves opmath) -


def _unary(
    op: torch._ops.OpOverload, fn: Callable[[TensorValue], TensorValue], exact: bool
) -> None:
    def lower(self: TensorValue) -> TensorValue:
        out = out_max_dtype()
        if op in _ROUNDINGS and not out.is_float():
            return as_tensor(self, out)  # an integer is its own floor (MAX: no kernel)
        return fn(as_tensor(self, out))

    lower.__name__ = op.__name__.split(".")[0]
    lower.__doc__ = str(op._schema).removeprefix("aten::")
    # Functions whose result is exact in any dtype need no float32 opmath.
    lowering(op)(lower if exact else opmath(lower))


_ROUNDINGS = (
    aten.floor.default,
    aten.ceil.default,
    aten.trunc.default,
    aten.round.default,
)
for _op, _fn, _exact in [
    (aten.abs.default, ops.abs, True),
    (aten.exp.default, torch_exp, False),
    (aten.log.default, ops.log, False),
    (aten.log1p.default, ops.log1p, False),
    (aten.sqrt.default, ops.sqrt, False),
    (aten.rsqrt.default, ops.rsqrt, False),
    (aten.sin.default, ops.sin, False),
    (aten.cos.default, ops.cos, False),
    (aten.erf.default, ops.erf, False),
    (aten.floor.default, ops.floor, True),
    (aten.ceil.default, ops.ceil, True),
    (aten.trunc.default, ops.trunc, True),
    (aten.round.default, ops.round, True),
]:
    _unary(_op, _fn, _exact)


@lowering(aten.reciprocal.default)
@opmath
def reciprocal(self: TensorValue) -> TensorValue:
    """reciprocal(Tensor self) -> Tensor"""
    x = as_tensor(self, out_max_dtype())
    return ops.div(as_tensor(1, x.dtype), x)


@lowering(aten.expm1.default)
@opmath
def expm1(self: TensorValue) -> TensorValue:
    """expm1(Tensor self) -> Tensor"""
    return accurate_expm1(as_tensor(self, out_max_dtype()))


def accurate_expm1(x: TensorValue) -> TensorValue:
    """exp(x) - 1 without the cancellation that loses every digit for tiny x.

    Kahan's form: with u = exp(x), (u - 1) * x / log(u) is accurate wherever
    u is neither 1 (then the answer is x) nor 0 or inf (then u - 1 is).
    """
    u = torch_exp(x)
    one = as_tensor(1, x.dtype)
    um1 = ops.sub(u, one)
    interior = ops.div(ops.mul(um1, x), ops.log(u))
    edge = ops.logical_or(ops.equal(um1, as_tensor(-1, x.dtype)), ops.is_inf(u))
    return ops.where(ops.equal(u, one), x, ops.where(edge, um1, interior))


@lowering(aten.sign.default)
def sign(self: TensorValue) -> TensorValue:
    """sign(Tensor self) -> Tensor"""
    zero = as_tensor(0, self.dtype)
    positive = ops.cast(ops.greater(self, zero), self.dtype)
    negative = ops.cast(ops.greater(zero, self), self.dtype)
    return ops.sub(positive, negative)


@lowering(aten.isnan.default)
def isnan(self: TensorValue) -> TensorValue:
    """isnan(Tensor self) -> Tensor"""
    if not self.dtype.is_float():
        return ops.broadcast_to(as_tensor(False, DType.bool), self.shape)
    return ops.is_nan(self)


@lowering(aten.isinf.default)
def isinf(self: TensorValue) -> TensorValue:
    """isinf(Tensor self) -> Tensor"""
    if not self.dtype.is_float():
        return ops.broadcast_to(as_tensor(False, DType.bool), self.shape)
    return ops.is_inf(self)


@lowering(aten.log2.default)
@opmath
def log2(self: TensorValue) -> TensorValue:
    """log2(Tensor self) -> Tensor"""
    x = as_tensor(self, out_max_dtype())
    return ops.mul(ops.log(x), as_tensor(1 / math.log(2), x.dtype))


@lowering(aten.log10.default)
@opmath
def log10(self: TensorValue) -> TensorValue:
    """log10(Tensor self) -> Tensor"""
    x = as_tensor(self, out_max_dtype())
    return ops.mul(ops.log(x), as_tensor(1 / math.log(10), x.dtype))
