"""The output plan: where each value the FX graph returns comes from at run time.

A MAX output, an FX input returned as it is, a size of one, a constant, or an
expression of sizes (``s0 + 1``, ``s0 // 2``) written as plain data
(``plan.SizeExpr``) that the runtime evaluates on each call's inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sympy
import torch
from max.graph import TensorValue, ops
from torch.utils._sympy import functions as size_fns

from ...errors import MaxCompilerError
from ...plan import Layout, OutputKind, OutputSlot, SizeExpr
from ..passes import EagerLayout

# A size (int or SymInt) as a size expression of the FX inputs' sizes.
SizeConverter = Callable[[int | torch.SymInt], SizeExpr]

# sympy (and torch's sympy functions) -> the size interpreter's operators.
_OPERATORS: dict[type, str] = {
    sympy.Add: "add",
    sympy.Mul: "mul",
    sympy.Max: "max",
    sympy.Min: "min",
    size_fns.Max: "max",
    size_fns.Min: "min",
    size_fns.FloorDiv: "floordiv",
    size_fns.CleanDiv: "floordiv",
    size_fns.PythonMod: "mod",
    size_fns.Mod: "mod",
    sympy.Mod: "mod",
    size_fns.PowByNatural: "pow",
}


def size_expr(
    expr: sympy.Expr,
    symbols: dict[sympy.Symbol, tuple[int, int]],
    name: str,
    ints: Mapping[sympy.Symbol, int] | None = None,
) -> SizeExpr:
    """``expr`` as a plan's size expression over the FX inputs' sizes (and
    ``ints``: symbolic int inputs, by FX input index)."""
    ints = ints or {}
    unknown = sorted(
        str(s) for s in expr.free_symbols if s not in symbols and s not in ints
    )
    if unknown:
        raise MaxCompilerError(
            f"the graph returns the size expression {expr} ({name}), but "
            f"{', '.join(unknown)} is not the size of any tensor input"
        )

    def convert(e: sympy.Expr) -> SizeExpr:
        if e.is_Integer:
            return ("int", int(e))
        if isinstance(e, sympy.Symbol):
            if e not in symbols:
                return ("arg", ints[e])
            return ("size", *symbols[e])
        if isinstance(e, size_fns.Identity):
            return convert(e.args[0])
        if isinstance(e, size_fns.ModularIndexing):
            base, divisor, modulus = map(convert, e.args)
            return ("mod", ("floordiv", base, divisor), modulus)
        if isinstance(e, size_fns.CeilDiv):
            return _ceil_div(*map(convert, e.args))
        if isinstance(e, _ROUNDED) and isinstance(e.args[0], size_fns.IntTrueDiv):
            # A ratio of ints rounded: math.ceil(n / 2), int(n / 2).
            a, b = map(convert, e.args[0].args)
            if isinstance(e, size_fns.CeilToInt):
                return _ceil_div(a, b)
            return (
                "floordiv" if isinstance(e, size_fns.FloorToInt) else "truncdiv",
                a,
                b,
            )
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) >= 0:
            return ("pow", convert(e.base), ("int", int(e.exp)))
        op = next((v for k, v in _OPERATORS.items() if type(e) is k), None)
        if op is None:
            raise MaxCompilerError(
                f"the graph returns the size expression {expr} ({name}), whose "
                f"{type(e).__name__} torch-max-backend cannot evaluate"
            )
        return (op, *(convert(a) for a in e.args))

    return convert(expr)


_ROUNDED = (size_fns.CeilToInt, size_fns.FloorToInt, size_fns.TruncToInt)


def _ceil_div(a: SizeExpr, b: SizeExpr) -> SizeExpr:
    minus_one = ("int", -1)
    return ("mul", minus_one, ("floordiv", ("mul", minus_one, a), b))


def layout(meta: torch.Tensor, convert: SizeConverter) -> Layout:
    """``meta``'s sizes, strides and storage offset as ``as_strided`` takes them."""
    return (
        tuple(convert(s) for s in meta.shape),
        tuple(convert(s) for s in meta.stride()),
        convert(meta.storage_offset()),
    )


def ordered_layout(
    meta: torch.Tensor, order: Sequence[int], convert: SizeConverter
) -> Layout:
    """A whole output written densely in the memory order ``order``: its
    sizes, and strides made from them (a traced stride may be a symbol of
    its own, which no input carries as a size)."""
    sizes = tuple(convert(s) for s in meta.shape)
    strides: list[SizeExpr] = [("int", 1)] * len(sizes)
    running: SizeExpr = ("int", 1)
    for d in reversed(order):
        strides[d] = running
        running = ("mul", running, sizes[d])
    return sizes, tuple(strides), ("int", 0)


class OutputPlan:
    """Collects the output slots and the distinct MAX outputs behind them."""

    def __init__(
        self,
        placeholders: list[torch.fx.Node],
        symbols: dict[sympy.Symbol, tuple[int, int]],
        eager_layouts: Mapping[int, EagerLayout],
        int_symbols: Mapping[sympy.Symbol, int],
    ) -> None:
        self.placeholders = placeholders
        self.symbols = symbols
        # Symbolic int inputs that are no tensor's size, by FX input index.
        self.int_symbols = int_symbols
        # The outputs that keep eager's strides and aliasing, by position
        # (passes/eager_layouts.py).
        self.eager_layouts = eager_layouts
        self.slots: list[OutputSlot] = []
        self.graph_outputs: list[TensorValue] = []
        self._seen: dict[int, int] = {}
        # (MAX value id, memory order) -> the MAX output written in that order.
        self._ordered: dict[tuple[int, tuple[int, ...]], int] = {}
        # (FX input index, graph output index): mutated inputs that are not
        # MAX buffers; the runtime copies the output into the input.
        self.written_back: list[tuple[int, int]] = []

    def write_back(self, node: torch.fx.Node, value: TensorValue) -> None:
        """The FX input ``node`` holds ``value`` after the call."""
        index = self.placeholders.index(node)
        self.written_back.append((index, self._output_index(value)))

    def add_input(self, node: torch.fx.Node) -> None:
        """The FX graph returns its input ``node`` (written in place, or as it is)."""
        self.slots.append(OutputSlot(OutputKind.INPUT, self.placeholders.index(node)))

    def add(self, item: Any, values: dict[torch.fx.Node, Any]) -> None:
        """The FX graph returns ``item``; ``values`` holds the built nodes."""
        self.slots.append(self._slot(item, values))

    def _slot(self, item: Any, values: dict[torch.fx.Node, Any]) -> OutputSlot:
        if item is None or isinstance(item, (int, float, bool)):
            return OutputSlot(OutputKind.CONST, value=item)
        if not isinstance(item, torch.fx.Node):
            raise MaxCompilerError(f"graph returns an unsupported value {item!r}")
        if item.op == "placeholder" and isinstance(item.meta.get("val"), torch.Tensor):
            return OutputSlot(OutputKind.INPUT, self.placeholders.index(item))
        meta = item.meta.get("val")
        if isinstance(meta, torch.SymInt):
            expr = meta.node.expr
            if expr.is_number:
                return OutputSlot(OutputKind.CONST, value=int(expr))
            if expr in self.symbols:
                j, d = self.symbols[expr]
                return OutputSlot(OutputKind.DIM, j, d)
            if expr in self.int_symbols:
                return OutputSlot(OutputKind.INPUT, self.int_symbols[expr])
            converted = size_expr(expr, self.symbols, item.name, self.int_symbols)
            return OutputSlot(OutputKind.EXPR, expr=converted)
        value = values[item]
        if not isinstance(value, TensorValue):
            raise MaxCompilerError(
                f"graph output {item.name} is a {type(value).__name__}, not a tensor"
            )
        eager = self.eager_layouts.get(len(self.slots))
        base = None if eager is None else values.get(eager.root)
        if eager is not None and isinstance(base, TensorValue):
            # Read through as_strided from a MAX output laid out as eager
            # lays out the memory it lies in.
            if eager.order is None:
                index = self._output_index(base)
            else:
                index = self._ordered_output(base, eager.order)
            convert = self._size_expr(item)
            meta = item.meta["val"]
            if eager.root is item and eager.order is not None:
                laid = ordered_layout(meta, eager.order, convert)
            else:
                laid = layout(meta, convert)
            return OutputSlot(OutputKind.GRAPH, index, layout=laid)
        return OutputSlot(OutputKind.GRAPH, self._output_index(value))

    def _ordered_output(self, value: TensorValue, order: tuple[int, ...]) -> int:
        """A MAX output holding ``value`` written in the memory order ``order``."""
        key = (id(value), tuple(order))
        if key not in self._ordered:
            self._ordered[key] = len(self.graph_outputs)
            self.graph_outputs.append(ops.permute(value, list(order)))
        return self._ordered[key]

    def _size_expr(self, item: torch.fx.Node) -> Any:
        def convert(size: int | torch.SymInt) -> SizeExpr:
            if isinstance(size, int):
                return ("int", size)
            return size_expr(size.node.expr, self.symbols, item.name, self.int_symbols)

        return convert

    def _output_index(self, value: TensorValue) -> int:
        """The MAX output returning ``value``, added the first time it is asked."""
        key = id(value)
        if key not in self._seen:
            self._seen[key] = len(self.graph_outputs)
            self.graph_outputs.append(value)
        return self._seen[key]
