"""Size expressions as plain data, and the small interpreter that evaluates them.

A graph may return an expression of its inputs' sizes (``s0 + 1``,
``s0 // 2``) for the code after it or for the backward. Lowering writes it as
a tree of tuples: ``("int", n)``, ``("size", input, dim)``, ``("arg",
input)`` (an input that is itself a symbolic int) or ``(op, operand, ...)``
with one of ``OPERATORS``. Data, not code: it pickles, and evaluating a plan
read from disk runs nothing but these operators.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

SizeExpr = tuple[Any, ...]
# Evaluates an expression on the FX inputs of one call.
SizeFunction = Callable[[Sequence[Any]], int]


def _python_mod(a: int, b: int) -> int:
    return a % b


def _trunc_div(a: int, b: int) -> int:
    # int(a / b) without a float's rounding: toward zero.
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


OPERATORS: dict[str, Callable[..., int]] = {
    "add": lambda *xs: sum(xs),
    "mul": lambda *xs: math.prod(xs),
    "floordiv": operator.floordiv,
    "truncdiv": _trunc_div,
    "mod": _python_mod,
    "pow": operator.pow,
    "max": max,
    "min": min,
}


def check_size_expr(expr: SizeExpr) -> None:
    """Raise ValueError unless ``expr`` is a well-formed size expression."""
    if not isinstance(expr, tuple) or not expr:
        raise ValueError(f"a size expression is a non-empty tuple, got {expr!r}")
    head, *rest = expr
    if head == "int":
        if len(rest) != 1 or not isinstance(rest[0], int):
            raise ValueError(f"malformed constant {expr!r}")
    elif head == "size":
        if len(rest) != 2 or not all(isinstance(r, int) for r in rest):
            raise ValueError(f"malformed input size {expr!r}")
    elif head == "arg":
        if len(rest) != 1 or not isinstance(rest[0], int):
            raise ValueError(f"malformed int input {expr!r}")
    elif head in OPERATORS:
        if not rest:
            raise ValueError(f"{head} without operands")
        for operand in rest:
            check_size_expr(operand)
    else:
        raise ValueError(f"unknown size operator {head!r}")


def _compile(expr: SizeExpr) -> SizeFunction:
    head, *rest = expr
    if head == "int":
        value = rest[0]
        return lambda args: value
    if head == "size":
        index, dim = rest
        return lambda args: args[index].shape[dim]
    if head == "arg":
        (index,) = rest
        return lambda args: args[index]
    fn = OPERATORS[head]
    operands = [_compile(operand) for operand in rest]
    if len(operands) == 2:
        a, b = operands
        return lambda args: fn(a(args), b(args))
    return lambda args: fn(*(o(args) for o in operands))


def compile_size_expr(expr: SizeExpr) -> SizeFunction:
    """A function of the FX inputs computing ``expr``, checked and built once."""
    check_size_expr(expr)
    compute = _compile(expr)
    return lambda args: int(compute(args))
