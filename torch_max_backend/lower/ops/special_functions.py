"""Special functions torch keeps outside core ATen: lgamma, digamma, erfc
and erfinv, which torch.distributions (Gamma, Beta, Dirichlet, StudentT,
Poisson, Normal's icdf) and losses such as poisson_nll_loss(full=True) use.

torch's decompositions of these end in prims no backend lowers, so a model
using one ran it in PyTorch, splitting its graph. Each is computed here in
float64 from MAX's primitives and rounded once to the output's dtype, with
eager's values at the edges (poles, infinities, NaN).
"""

from __future__ import annotations

import math

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..registry import lowering
from ..scalars import as_tensor, out_max_dtype

aten = torch.ops.aten

_WIDE = DType.float64


def _c(value: float) -> TensorValue:
    return as_tensor(value, _WIDE)


def _poly(x: TensorValue, coefficients: list[float]) -> TensorValue:
    """The polynomial of ``x`` with ``coefficients``, highest power first."""
    total = _c(coefficients[0])
    for c in coefficients[1:]:
        total = ops.add(ops.mul(total, x), _c(c))
    return total


def _non_positive_integer(x: TensorValue) -> TensorValue:
    return ops.logical_and(ops.greater_equal(_c(0.0), x), ops.equal(x, ops.floor(x)))


def _with_nan(x: TensorValue, result: TensorValue) -> TensorValue:
    """NaN where ``x`` is NaN: MAX's exp and log do not all keep it."""
    return ops.where(ops.is_nan(x), _c(math.nan), result)


# Lanczos' approximation, g = 7 and nine terms: relative error about 1e-15.
_LANCZOS_G = 7.0
_LANCZOS = [
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
]


def _lgamma_from_half(z: TensorValue) -> TensorValue:
    """log|Gamma(z)| for z >= 0.5."""
    z = ops.sub(z, _c(1.0))
    series = _c(_LANCZOS[0])
    for i, p in enumerate(_LANCZOS[1:], start=1):
        series = ops.add(series, ops.div(_c(p), ops.add(z, _c(float(i)))))
    t = ops.add(z, _c(_LANCZOS_G + 0.5))
    return ops.add(
        ops.sub(
            ops.add(
                _c(0.5 * math.log(2 * math.pi)),
                ops.mul(ops.add(z, _c(0.5)), ops.log(t)),
            ),
            t,
        ),
        ops.log(series),
    )


@lowering(aten.lgamma.default)
def lgamma(self: TensorValue) -> TensorValue:
    """lgamma(Tensor self) -> Tensor"""
    x = ops.cast(self, _WIDE)
    low = ops.greater(_c(0.5), x)
    # Reflection below 1/2: log|Gamma(x)| = log(pi / |sin(pi x)|) - log|Gamma(1 - x)|.
    z = ops.where(low, ops.sub(_c(1.0), x), x)
    upper = _lgamma_from_half(z)
    sine = ops.abs(ops.sin(ops.mul(_c(math.pi), x)))
    reflected = ops.sub(ops.log(ops.div(_c(math.pi), sine)), upper)
    result = ops.where(low, reflected, upper)
    # Poles at 0, -1, -2, ... and both infinities: +inf, as torch.
    infinite = ops.logical_or(_non_positive_integer(x), ops.is_inf(x))
    result = ops.where(infinite, _c(math.inf), result)
    return ops.cast(_with_nan(x, result), out_max_dtype())


# digamma's asymptotic series in 1 / w^2 (Bernoulli numbers), highest
# power first, for w >= 6.5: its first term left out is below 3e-12 of it.
_DIGAMMA_SERIES = [
    -1 / 132,  # the 1 / w^10 term: -B10 / 10
    1 / 240,
    -1 / 252,
    1 / 120,
    -1 / 12,
    0.0,
]
_DIGAMMA_SHIFT = 6


def _digamma_from_half(y: TensorValue) -> TensorValue:
    """digamma(y) for y >= 0.5: moved up by six steps of its recurrence
    (digamma(y) = digamma(y + 1) - 1 / y), then the asymptotic series."""
    steps = _c(0.0)
    for k in range(_DIGAMMA_SHIFT):
        steps = ops.add(steps, ops.div(_c(1.0), ops.add(y, _c(float(k)))))
    w = ops.add(y, _c(float(_DIGAMMA_SHIFT)))
    inverse_square = ops.div(_c(1.0), ops.mul(w, w))
    series = _poly(inverse_square, _DIGAMMA_SERIES)
    asymptotic = ops.sub(ops.log(w), ops.div(_c(0.5), w))
    return ops.sub(ops.add(asymptotic, series), steps)


@lowering(aten.digamma.default)
def digamma(self: TensorValue) -> TensorValue:
    """digamma(Tensor self) -> Tensor"""
    x = ops.cast(self, _WIDE)
    low = ops.greater(_c(0.5), x)
    # Reflection below 1/2: digamma(x) = digamma(1 - x) - pi / tan(pi x),
    # which gives -inf at +0 and +inf at -0, as torch.
    y = ops.where(low, ops.sub(_c(1.0), x), x)
    upper = _digamma_from_half(y)
    angle = ops.mul(_c(math.pi), x)
    cotangent = ops.div(ops.cos(angle), ops.sin(angle))
    result = ops.where(low, ops.sub(upper, ops.mul(_c(math.pi), cotangent)), upper)
    # NaN at the negative integers and -inf; +inf at +inf.
    negative_pole = ops.logical_and(_non_positive_integer(x), ops.greater(_c(0.0), x))
    undefined = ops.logical_or(negative_pole, ops.equal(x, _c(-math.inf)))
    result = ops.where(ops.equal(x, _c(math.inf)), _c(math.inf), result)
    result = ops.where(undefined, _c(math.nan), result)
    return ops.cast(_with_nan(x, result), out_max_dtype())


# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), for z >= 0: relative
# error below 1.2e-7 everywhere (a Chebyshev fit, as in Numerical Recipes).
_ERFC = [
    0.17087277,
    -0.82215223,
    1.48851587,
    -1.13520398,
    0.27886807,
    -0.18628806,
    0.09678418,
    0.37409196,
    1.00002368,
    -1.26551223,
]


def _float32_result(node: torch.fx.Node) -> str | None:
    """float32, float16 and bfloat16 results (the approximation's error is
    about float32's rounding)."""
    meta = node.meta.get("val")
    if getattr(meta, "dtype", None) == torch.float64:
        return f"{node.target} of float64 values"
    return None


@lowering(aten.erfc.default, supports=_float32_result)
def erfc(self: TensorValue) -> TensorValue:
    """erfc(Tensor self) -> Tensor"""
    x = ops.cast(self, _WIDE)
    z = ops.abs(x)
    t = ops.div(_c(1.0), ops.add(_c(1.0), ops.mul(_c(0.5), z)))
    exponent = ops.sub(_poly(t, _ERFC), ops.mul(z, z))
    tail = ops.mul(t, ops.exp(exponent))
    # 2 - erfc(-x) for negative x; erfc(+inf) = 0 (exp of -inf).
    result = ops.where(ops.greater_equal(x, _c(0.0)), tail, ops.sub(_c(2.0), tail))
    return ops.cast(_with_nan(x, result), out_max_dtype())


# erfinv by Giles' single-precision approximation ("Approximating the
# erfinv function", 2010): a polynomial in w = -log(1 - x^2), one for the
# centre (w < 5) and one in sqrt(w) for the tails.
_ERFINV_CENTRE = [
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
]
_ERFINV_TAIL = [
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
]


@lowering(aten.erfinv.default, supports=_float32_result)
def erfinv(self: TensorValue) -> TensorValue:
    """erfinv(Tensor self) -> Tensor"""
    x = ops.cast(self, _WIDE)
    w = ops.negate(ops.log(ops.mul(ops.sub(_c(1.0), x), ops.add(_c(1.0), x))))
    centre = ops.greater(_c(5.0), w)
    # Each branch at a point where it is finite; the other's is not read.
    w_centre = ops.where(centre, w, _c(2.5))
    w_tail = ops.where(centre, _c(9.0), w)
    near = _poly(ops.sub(w_centre, _c(2.5)), _ERFINV_CENTRE)
    far = _poly(ops.sub(ops.sqrt(w_tail), _c(3.0)), _ERFINV_TAIL)
    result = ops.mul(ops.where(centre, near, far), x)
    # +-inf at +-1, NaN past them.
    one = ops.equal(ops.abs(x), _c(1.0))
    result = ops.where(one, ops.mul(x, _c(math.inf)), result)
    result = ops.where(ops.greater(ops.abs(x), _c(1.0)), _c(math.nan), result)
    return ops.cast(_with_nan(x, result), out_max_dtype())
