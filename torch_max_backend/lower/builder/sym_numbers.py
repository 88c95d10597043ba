"""Python arithmetic that Dynamo leaves on symbolic numbers, lowered.

A graph computes on its symbolic ints with Python's operators (``n // 2``,
``n / 2``, ``n % 3``, ``max(n, 1)``, ``math.floor``). Where every operand is
a MAX ``Dim`` or a plain int and MAX's dim algebra has the operator (``+``,
``-``, ``*``, ``//``, negation), the result stays a dim, usable as a size.
Anything else (a float result, a remainder, an int fed as a value rather
than a dim) is computed at run time on rank-0 tensors, as Python computes it,
and reaches ops as a number operand (``ScalarArg``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from max.dtype import DType
from max.graph import DeviceRef, Dim, TensorValue, ops

from ..scalars import ScalarArg
from ..shapes import size_value

# Operators MAX's dims are closed under.
_DIM_ALGEBRA = (operator.add, operator.sub, operator.mul, operator.floordiv)


def _floor_div(a: TensorValue, b: TensorValue) -> TensorValue:
    if a.dtype == DType.int64:
        return ops.floor_div(a, b)  # rounds toward -inf, as Python's //
    return ops.floor(ops.div(a, b))


def _mod(a: TensorValue, b: TensorValue) -> TensorValue:
    # Python's %: the sign of the divisor.
    return ops.sub(a, ops.mul(_floor_div(a, b), b))


def _to_int(rounding: Callable[[TensorValue], TensorValue]) -> Any:
    def apply(a: TensorValue) -> TensorValue:
        if a.dtype == DType.int64:
            return a
        return ops.cast(rounding(a), DType.int64)

    return apply


# Each operator: (how it computes on values of one dtype, the Python type of
# its result given its operands' types; None: int if all are ints, else float).
_ON_VALUES: dict[Callable[..., Any], tuple[Callable[..., TensorValue], type | None]] = {
    operator.add: (ops.add, None),
    operator.sub: (ops.sub, None),
    operator.mul: (ops.mul, None),
    operator.floordiv: (_floor_div, None),
    operator.mod: (_mod, None),
    operator.truediv: (ops.div, float),
    operator.pow: (ops.pow, None),
    operator.neg: (ops.negate, None),
    operator.abs: (ops.abs, None),
    torch.sym_max: (ops.max, None),
    torch.sym_min: (ops.min, None),
    torch.sym_float: (lambda a: a, float),
    torch.sym_int: (_to_int(ops.trunc), int),
    math.floor: (_to_int(ops.floor), int),
    math.ceil: (_to_int(ops.ceil), int),
    math.trunc: (_to_int(ops.trunc), int),
    torch._sym_sqrt: (ops.sqrt, float),
}

# Every Python-level function Dynamo and AOTAutograd leave on symbolic
# numbers and on tuples (an op's tuple result indexed).
# torch.sym_sum (Python's sum() of symbolic ints, as Dynamo traces it) is
# a chain of additions.
SYM_TARGETS: frozenset[Callable[..., Any]] = frozenset(
    (*_ON_VALUES, operator.getitem, torch.sym_sum)
)


def dim_operand(dim: Dim, device: DeviceRef) -> ScalarArg | int:
    """The value of ``dim`` as a number operand: an int when static, else an
    int64 scalar read from the shape at run time."""
    value = size_value(dim)
    if isinstance(value, int):
        return value
    if device != DeviceRef.CPU():
        value = value.to(device)
    return ScalarArg(value, int)


def _python(target: Callable[..., Any]) -> Callable[..., Any]:
    return math.sqrt if target is torch._sym_sqrt else target


def _operand(value: Any, device: DeviceRef) -> tuple[TensorValue, type]:
    if isinstance(value, Dim):
        value = dim_operand(value, device)
    if isinstance(value, ScalarArg):
        return value.value, value.kind
    if isinstance(value, TensorValue):
        return value, int
    kind = float if isinstance(value, float) else int
    dtype = DType.float64 if kind is float else DType.int64
    return ops.constant(value, dtype, device), kind


def number_op(target: Callable[..., Any], args: list[Any], device: DeviceRef) -> Any:
    """``target(*args)`` over plain numbers, MAX dims and run-time numbers."""
    if target is operator.getitem:
        return args[0][args[1]]
    if target is torch.sym_sum:
        total: Any = 0
        for term in args[0]:
            total = number_op(operator.add, [total, term], device)
        return total
    symbolic = [a for a in args if isinstance(a, (Dim, ScalarArg))]
    if not symbolic:
        return _python(target)(*args)
    size = _as_size(target, args)
    if size is not None:
        return size
    compute, kind = _ON_VALUES[target]
    operands = [_operand(a, device) for a in args]
    if kind is None:
        kind = int if all(k is not float for _, k in operands) else float
    if target is operator.pow and kind is int:
        return ScalarArg(_int_power(operands[0][0], args[1]), int)
    dtype = DType.int64 if kind is int else DType.float64
    inputs_dtype = dtype
    if target in _ROUNDINGS:
        inputs_dtype = operands[0][0].dtype
    values = [ops.cast(v, inputs_dtype) for v, _ in operands]
    result = ops.cast(compute(*values), dtype)
    if target is operator.truediv and _is_size(args[0]) and _positive(args[1]):
        return Ratio(result, float, args[0], args[1])
    return ScalarArg(result, kind)


@dataclass(frozen=True)
class Ratio(ScalarArg):
    """``numerator / denominator`` of sizes: a float number, and the pair that
    rounding (``math.ceil(n / 2)``) turns back into a size."""

    numerator: Dim | int
    denominator: Dim | int


_ROUNDINGS = (math.floor, math.ceil, math.trunc, torch.sym_int)


def _is_size(value: Any) -> bool:
    return isinstance(value, (Dim, int)) and not isinstance(value, bool)


def _positive(value: Any) -> bool:
    # A dim is a size, so at least 0; one of 0 would fail in torch first.
    return isinstance(value, Dim) or (_is_size(value) and value > 0)


def _as_size(target: Callable[..., Any], args: list[Any]) -> Dim | None:
    """``target(*args)`` in MAX's dim algebra, when it is a size there: the
    operators MAX's dims have, a remainder, and a ratio of sizes rounded
    (sizes are never negative, so truncating is flooring)."""
    if target in _ROUNDINGS and isinstance(args[0], Ratio):
        a, b = args[0].numerator, args[0].denominator
        return (a + b - 1) // b if target is math.ceil else a // b
    if not all(_is_size(a) for a in args):
        return None
    if target in _DIM_ALGEBRA or target is operator.neg:
        return target(*args)
    if target is operator.mod and _positive(args[1]):
        a, b = args
        return a - (a // b) * b
    if target is operator.abs:
        return args[0]
    return None


def _int_power(base: TensorValue, exponent: Any) -> TensorValue:
    # Python's int ** int is exact, and an int only for an exponent of at
    # least 0, which Dynamo specializes on (a symbolic exponent arrives as a
    # plain int here).
    if not isinstance(exponent, int) or not 0 <= exponent <= 64:
        raise NotImplementedError(
            "an int raised to an int known only at run time, or past 64"
        )
    base = ops.cast(base, DType.int64)
    result = ops.constant(1, DType.int64, base.device)
    for _ in range(exponent):
        result = ops.mul(result, base)
    return result
