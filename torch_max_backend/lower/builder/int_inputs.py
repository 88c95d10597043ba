"""Symbolic ints as MAX sees them: as operands, and as graph inputs of their own.

Dynamo turns a Python int that changes between calls (a length, a count, a
step) into a symbolic int (SymInt) input of the graph, and sizes of dynamic
tensors reach ops as SymInts too. MAX knows a symbolic size only as a dim of
a tensor input, so:

- a SymInt input that is no tensor input's size is fed as an empty
  ``[n, 0]`` int8 tensor whose first dim carries it (no bytes move), when
  ``n`` is known not to be negative (a dim cannot be);
- a SymInt (a MAX ``Dim``) that an elementwise op takes as its number
  operand (``x * n``) is read from the shape at run time as an int64 scalar.
"""

from __future__ import annotations

from typing import Any

import torch
from max.dtype import DType
from max.graph import DeviceRef, Dim, TensorType

from ..registry import lifts_scalars
from ..scalars import ScalarArg
from ..shapes import max_dim, size_value


def is_free_int(meta: Any, tensor_symbols: dict) -> bool:
    """Whether a placeholder's ``meta`` is a symbolic int that no tensor input
    carries as a size, and that can never be negative.

    Asking whether it is at least zero guards the compiled graph on the
    answer (as Inductor's size checks do): a later negative value makes
    Dynamo trace again, and that graph keeps its int in PyTorch.
    """
    if not isinstance(meta, torch.SymInt):
        return False
    expr = meta.node.expr
    if not expr.is_Symbol or expr in tensor_symbols:
        return False
    try:
        return bool(meta >= 0)
    except Exception:  # no shape environment to guard in: keep the old path
        return False


def carrier_type(meta: torch.SymInt, name: str, device: DeviceRef) -> TensorType:
    """The MAX input type carrying the symbolic int ``meta`` as its first dim."""
    return TensorType(DType.int8, [max_dim(meta, f"int input {name}"), 0], device)


def takes_number(arg: torch.Argument) -> bool:
    """Whether a schema argument may hold a Python number: a Scalar, or a
    Tensor slot holding a wrapped number (``mul.Tensor(x, 2)``)."""
    t = arg.type
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, (torch.NumberType, torch.TensorType))


def _as_operand(dim: Dim, device: DeviceRef) -> ScalarArg | int:
    value = size_value(dim)
    if isinstance(value, int):
        return value
    if device != DeviceRef.CPU():
        value = value.to(device)
    return ScalarArg(value, int)


def dims_as_operands(
    node: torch.fx.Node,
    fn: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    device: DeviceRef,
) -> None:
    """Replace, in place, each ``Dim`` in a number slot of an op whose lowering
    takes lifted numbers (``x * n``, ``x + n``) by an int64 scalar of it."""
    if not lifts_scalars(fn) or not hasattr(node.target, "_schema"):
        return
    for pos, arg in enumerate(node.target._schema.arguments):
        if pos < len(args):
            if isinstance(args[pos], Dim) and takes_number(arg):
                args[pos] = _as_operand(args[pos], device)
        elif isinstance(kwargs.get(arg.name), Dim) and takes_number(arg):
            kwargs[arg.name] = _as_operand(kwargs[arg.name], device)
