"""Symbolic ints as MAX sees them: as operands, and as graph inputs of their own.

Dynamo turns a Python int that changes between calls (a length, a count, a
step) into a symbolic int (SymInt) input of the graph, and sizes of dynamic
tensors reach ops as SymInts too. MAX knows a symbolic size only as a dim of
a tensor input, so:

- a SymInt input that is no tensor input's size, but that the graph uses
  as one (a length, a slice bound, an index), is fed as an empty ``[n, 0]``
  int8 tensor whose first dim carries it (no bytes move), when ``n`` is
  known not to be negative (a dim cannot be);
- a SymInt input that the graph uses only as a number (``x * n``,
  ``n / 2``) is fed as its value, a rank-0 int64 tensor, whatever its sign;
- a SymInt (a MAX ``Dim``) that an elementwise op takes as its number
  operand (``x * n``) is read from the shape at run time as an int64 scalar.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
from max.dtype import DType
from max.graph import DeviceRef, Dim, TensorType, TensorValue
from torch.fx.node import map_arg
from torch.utils._pytree import tree_leaves

from ...errors import MaxCompilerError, UnsupportedCase
from ...plan import InputKind
from ..kit import schema_args
from ..registry import lifts_scalars
from ..scalars import ScalarArg
from ..shapes import max_dim
from .sym_numbers import SYM_TARGETS, dim_operand


def sized_symbols(gm: torch.fx.GraphModule) -> set[sympy.Symbol]:
    """The symbols ``gm`` uses as sizes: in a tensor's shape, or in an op's
    int argument other than a number operand (a length, an index, a count),
    or handed to anything but an op or Python arithmetic."""
    found: set[sympy.Symbol] = set()
    for node in gm.graph.nodes:
        for meta in tree_leaves(node.meta.get("val")):
            if isinstance(meta, torch.Tensor):
                found |= _symbols_of(tuple(meta.shape))
        if node.op != "call_function" or node.target in SYM_TARGETS:
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:  # a higher-order op: what its graphs do is unread
            found |= _symbols_read((node.args, node.kwargs))
            continue
        slots = {a.name: a for a in schema.arguments}
        for name, value in schema_args(node).items():
            if name not in slots or not takes_number(slots[name]):
                found |= _symbols_read(value)
    return found


def int_input_kind(meta: Any, tensor_symbols: dict, sized: set) -> InputKind | None:
    """How a placeholder's ``meta`` is fed when it is a symbolic int that no
    tensor input carries as a size: its value (``NUMBER``) when the graph
    uses it only as a number, else a carrier's dim (``INT``) when it can
    never be negative; None otherwise.

    Asking whether it is at least zero guards the compiled graph on the
    answer (as Inductor's size checks do): a later negative value makes
    Dynamo trace again, and that graph keeps its int in PyTorch.
    """
    if not isinstance(meta, torch.SymInt):
        return None
    expr = meta.node.expr
    if not expr.is_Symbol or expr in tensor_symbols:
        return None
    if expr not in sized:
        return InputKind.NUMBER
    try:
        return InputKind.INT if bool(meta >= 0) else None
    except Exception:  # no shape environment to guard in: keep the old path
        return None


def number_type(device: DeviceRef) -> TensorType:
    """The MAX input type carrying an int used only as a number."""
    return TensorType(DType.int64, [], device)


def _symbols_of(value: Any) -> set[sympy.Symbol]:
    """The symbols of every symbolic number among ``value``'s leaves."""
    return {
        symbol
        for leaf in tree_leaves(value)
        if isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool))
        for symbol in leaf.node.expr.free_symbols
    }


def _symbols_read(value: Any) -> set[sympy.Symbol]:
    """The symbols of the values of the FX nodes that ``value`` holds."""
    nodes: list[torch.fx.Node] = []
    map_arg(value, nodes.append)
    return {s for node in nodes for s in _symbols_of(node.meta.get("val"))}


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
                args[pos] = dim_operand(args[pos], device)
        elif isinstance(kwargs.get(arg.name), Dim) and takes_number(arg):
            kwargs[arg.name] = dim_operand(kwargs[arg.name], device)


def named_cause(
    node: torch.fx.Node, args: list[Any], kwargs: dict[str, Any], error: Exception
) -> Exception:
    """What a lowering's failure on ``node`` is reported as: ``error``, or,
    when one of its number operands is known only at run time (``x ** n``,
    a symbolic ``n``) and the lowering needed it while building, that."""
    schema = getattr(node.target, "_schema", None)
    for pos, arg in enumerate(schema.arguments if schema else ()):
        value = args[pos] if pos < len(args) else kwargs.get(arg.name)
        if isinstance(value, (Dim, ScalarArg)) and takes_number(arg):
            late = UnsupportedCase(
                f"{node.target} with its {arg.name} known only at run time"
            )
            late.__cause__ = error
            return late
    return error


def int_value(
    node: torch.fx.Node, plan: Any, tensor_of: Callable[[int], TensorValue]
) -> Dim | ScalarArg | int:
    """The value of a symbolic int placeholder, from the MAX input ``plan``
    (planning.InputPlan) gives it (``tensor_of`` reads an input's value)."""
    expr = node.meta["val"].node.expr
    if expr.is_number:  # specialized while tracing (linspace guards its count)
        return int(expr)
    if node in plan.number_input_of:
        return ScalarArg(tensor_of(plan.number_input_of[node]), int)
    if expr in plan.symbols:
        j, d = plan.symbols[expr]
        return tensor_of(plan.input_of[plan.placeholders[j]]).shape[d]
    if node in plan.int_input_of:
        return tensor_of(plan.int_input_of[node]).shape[0]
    # An expression of sizes (16*s0, saved for backward): computed from the
    # dims the inputs name, as the graph's own size arithmetic is.
    if (dim := plan.named_dim(expr)) is not None:
        return dim
    raise MaxCompilerError(
        f"symbolic int input {node.name} ({expr}) is no tensor input's "
        "size and may be negative, which a MAX dim cannot carry"
    )
