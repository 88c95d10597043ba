"""FX ATen graph -> ``max.graph.Graph``, with nothing op-specific in it.

The builder decides what the graph's inputs are (tensors, constants and lifted
Python scalars), walks the nodes calling the registered lowerings, and writes
a blueprint saying how MAX's outputs become the values the FX graph returns.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from max.graph import BufferType, DeviceRef, Graph, TensorType, TensorValue, ops
from torch._ops import OpOverload
from torch.utils._sympy.printers import PythonPrinter

from ..errors import (
    LoweringError,
    MaxCompilerError,
    UnsupportedOp,
    UnsupportedOpsError,
    op_schema,
    user_frame,
)
from .context import lowering_node
from .dtypes import supported_dtype, to_device_ref, to_max_dtype
from .layout import ChannelsLastTwins, is_pointwise
from .registry import (
    MAPPING_TORCH_ATEN_TO_MAX,
    LoweringFn,
    draws_random,
    lifts_scalars,
    unsupported_reason,
)
from .scalars import ScalarArg
from .shapes import max_dim, static_size

# A fixed name: MAX's caches key on the graph text, name included.
GRAPH_NAME = "torch_max_graph"

# Python-level functions Dynamo and AOTAutograd leave on SymInts and tuples.
_SYM_FUNCTIONS: dict[Callable[..., Any], Callable[..., Any]] = {
    operator.getitem: operator.getitem,
    operator.add: operator.add,
    operator.sub: operator.sub,
    operator.mul: operator.mul,
    operator.floordiv: operator.floordiv,
    operator.neg: operator.neg,
}


@dataclass(frozen=True)
class OutputSlot:
    """Where one value returned by the FX graph comes from at run time.

    kind: "graph" (MAX output number ``index``), "input" (FX input ``index``
    itself), "dim" (size ``dim`` of FX input ``index``), "expr" (``value`` is a
    function of the FX inputs computing a size expression) or "const"
    (``value``).
    """

    kind: str
    index: int = -1
    dim: int = -1
    value: object = None


class SeedInput:
    """Marks the graph input that takes a fresh random seed at every call.

    The seed is drawn from torch's default generator, so ``torch.manual_seed``
    makes MAX's random ops reproducible.
    """

    def __repr__(self) -> str:
        return "<seed>"


SEED = SeedInput()


@dataclass
class BuiltGraph:
    """A MAX graph and what the runtime needs to call it like the FX graph."""

    graph: Graph
    device: torch.device
    # For each MAX input in order: an FX input index (int), a constant tensor,
    # or SEED.
    inputs: list[int | torch.Tensor | SeedInput]
    outputs: list[OutputSlot]
    # FX input indices the graph writes in place (MAX buffers): AOTAutograd's
    # input mutations, such as an optimizer's parameter and momentum updates.
    mutated: list[int] = field(default_factory=list)
    num_graph_outputs: int = 0


def _first_tensor_meta(values: Any) -> torch.Tensor | None:
    """The fake tensor of the first tensor among ``values``, looking into lists.

    ``_foreach_*`` ops take lists of tensors, and their scalar operands promote
    against the list's dtype just as a plain op's scalar does against its tensor.
    """
    for value in values:
        if isinstance(value, torch.fx.Node):
            value = value.meta.get("val")  # a fake tensor, or a list of them
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (list, tuple)):
            found = _first_tensor_meta(value)
            if found is not None:
                return found
    return None


def _takes_number(arg: torch.Argument) -> bool:
    """Whether a schema argument may hold a Python number: a Scalar, or a
    Tensor slot holding a wrapped number (``mul.Tensor(x, 2)``)."""
    t = arg.type
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, (torch.NumberType, torch.TensorType))


def _lookup(node: torch.fx.Node) -> LoweringFn | None:
    if isinstance(node.target, OpOverload):
        return MAPPING_TORCH_ATEN_TO_MAX.get(node.target)
    return None


def why_unsupported(node: torch.fx.Node) -> tuple[str, str, str] | None:
    """(op name, schema, reason) when ``node`` cannot be lowered, else None.

    Nodes that are not ops (placeholders of supported dtypes, outputs, size
    arithmetic) are supported. The reason is "" for an op with no lowering.
    """
    if node.op == "placeholder" or node.op == "get_attr":
        meta = node.meta.get("val")
        if isinstance(meta, torch.Tensor) and not supported_dtype(meta.dtype):
            reason = f"dtype {meta.dtype} has no MAX equivalent"
            return f"input of dtype {meta.dtype}", node.name, reason
        return None
    if node.op != "call_function" or node.target in _SYM_FUNCTIONS:
        return None
    fn = _lookup(node)
    if fn is not None:
        reason = unsupported_reason(fn, node)
        if reason is None:
            return None
    else:
        reason = ""
    return str(node.target), op_schema(node.target), reason


def find_unsupported(graphs: Sequence[torch.fx.GraphModule]) -> list[UnsupportedOp]:
    """Every op of ``graphs`` that the registry cannot lower, grouped by op."""
    found: dict[str, UnsupportedOp] = {}
    for gm in graphs:
        for node in gm.graph.nodes:
            why = why_unsupported(node)
            if why is None:
                continue
            key, schema, reason = why
            op = found.setdefault(key, UnsupportedOp(key, schema))
            op.count += 1
            if reason:
                op.reasons[reason] += 1
            source = user_frame(node)
            if source and source not in op.sources:
                op.sources.append(source)
    return sorted(found.values(), key=lambda op: op.name)


def check_supported(graphs: Sequence[torch.fx.GraphModule]) -> None:
    unsupported = find_unsupported(graphs)
    if unsupported:
        raise UnsupportedOpsError(unsupported)


def _graph_device(gm: torch.fx.GraphModule) -> torch.device:
    devices: Counter[torch.device] = Counter()
    for node in gm.graph.nodes:
        meta = node.meta.get("val")
        if node.op == "placeholder" and isinstance(meta, torch.Tensor):
            devices[meta.device] += 1
    if len(devices) > 1:
        listing = ", ".join(str(d) for d in devices)
        raise MaxCompilerError(
            f"the graph's inputs are on several devices ({listing}); "
            "torch-max-backend compiles one graph per device: move the inputs "
            "and parameters to one device"
        )
    if devices:
        return next(iter(devices))
    for node in gm.graph.nodes:
        meta = node.meta.get("val")
        if isinstance(meta, torch.Tensor):
            return meta.device
    return torch.device("cpu")


class GraphBuilder:
    """Builds one MAX graph from one FX ATen graph."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.device = _graph_device(gm)
        self.device_ref: DeviceRef = to_device_ref(self.device)
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.input_types: list[TensorType | BufferType] = []
        self.inputs: list[int | torch.Tensor | SeedInput] = []
        self.seed_index: int | None = None
        # FX node -> MAX input number, for tensor placeholders and constants.
        self.input_of: dict[torch.fx.Node, int] = {}
        # node -> (argument position or name, MAX input number, Python type) of
        # each lifted scalar of that node.
        self.scalars_of: dict[torch.fx.Node, list[tuple[int | str, int, type]]] = {}
        # sympy symbol -> (FX input index, dim), for symbolic sizes.
        self.symbols: dict[sympy.Symbol, tuple[int, int]] = {}
        self.values: dict[torch.fx.Node, Any] = {}
        # Tensor inputs the graph writes in place (planned in _plan_inputs).
        self.mutated: list[torch.fx.Node] = []
        self.twins = ChannelsLastTwins()

    # -- inputs ---------------------------------------------------------------

    def _add_input(
        self,
        source: int | torch.Tensor | SeedInput,
        meta: torch.Tensor,
        where: str,
        mutable: bool = False,
    ) -> int:
        shape = [max_dim(s, where) for s in meta.shape]
        kind = BufferType if mutable else TensorType
        self.input_types.append(kind(to_max_dtype(meta.dtype), shape, self.device_ref))
        self.inputs.append(source)
        return len(self.inputs) - 1

    def _plan_inputs(self) -> None:
        self.mutated = [
            node
            for node in self.placeholders
            if any(_writes_input(user, node) for user in node.users)
        ]
        for i, node in enumerate(self.placeholders):
            meta = node.meta.get("val")
            if isinstance(meta, torch.Tensor):
                self.input_of[node] = self._add_input(
                    i, meta, f"input {node.name}", mutable=node in self.mutated
                )
                for d, size in enumerate(meta.shape):
                    if isinstance(size, torch.SymInt) and isinstance(
                        size.node.expr, sympy.Symbol
                    ):
                        self.symbols.setdefault(size.node.expr, (i, d))
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                value = operator.attrgetter(node.target)(self.gm)
                if not isinstance(value, torch.Tensor):
                    raise MaxCompilerError(
                        f"graph attribute {node.target!r} is a "
                        f"{type(value).__name__}, not a tensor"
                    )
                if value.numel() > 0:
                    # A graph input, not a baked constant: the compiled graph
                    # then stays the same whatever the constant's value.
                    self.input_of[node] = self._add_input(
                        value.detach().to(self.device), value, f"constant {node.target}"
                    )
            elif node.op == "call_function":
                self._plan_scalars(node)
                fn = _lookup(node)
                if fn is not None and draws_random(fn) and self.seed_index is None:
                    meta = torch.empty((1,), dtype=torch.int64)
                    self.seed_index = self._add_input(SEED, meta, "random seed")

    def _plan_scalars(self, node: torch.fx.Node) -> None:
        fn = _lookup(node)
        if fn is None or not lifts_scalars(fn):
            return
        schema = node.target._schema
        first_tensor = _first_tensor_meta(node.args)
        for pos, arg in enumerate(schema.arguments):
            key: int | str = pos if pos < len(node.args) else arg.name
            if isinstance(key, int):
                value = node.args[key]
            elif key in node.kwargs:
                value = node.kwargs[key]
            else:
                continue
            if not _takes_number(arg) or type(value) not in (bool, int, float):
                continue
            if first_tensor is not None:
                dtype = torch.result_type(
                    torch.empty((1,), dtype=first_tensor.dtype), value
                )
            else:
                meta = _first_tensor_meta([node])
                dtype = meta.dtype if meta is not None else torch.tensor(value).dtype
            tensor = torch.tensor(value, dtype=dtype, device=self.device)
            index = self._add_input(tensor, tensor, f"scalar of {node.name}")
            self.scalars_of.setdefault(node, []).append((key, index, type(value)))

    # -- nodes ----------------------------------------------------------------

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return self.values[value]
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v) for v in value)
        return value

    def _arguments(self, node: torch.fx.Node) -> tuple[list[Any], dict[str, Any]]:
        args = [self._resolve(a) for a in node.args]
        kwargs = {k: self._resolve(v) for k, v in node.kwargs.items()}
        for key, index, kind in self.scalars_of.get(node, ()):
            scalar = ScalarArg(self.graph.inputs[index].tensor, kind)
            if isinstance(key, int):
                args[key] = scalar
            else:
                kwargs[key] = scalar
        return args, kwargs

    def _check_result(self, node: torch.fx.Node, result: Any) -> None:
        """A lowering's result must have the dtype and static sizes torch says."""
        meta = node.meta.get("val")
        if isinstance(result, TensorValue) and isinstance(meta, torch.Tensor):
            expected = to_max_dtype(meta.dtype)
            if result.dtype != expected:
                raise TypeError(
                    f"lowering returned dtype {result.dtype.name}, expected {expected.name}"
                )
            got = [static_size(d) for d in result.shape]
            want = [s if isinstance(s, int) else None for s in meta.shape]
            mismatch = len(got) != len(want) or any(
                g is not None and w is not None and g != w
                for g, w in zip(got, want, strict=True)
            )
            if mismatch:
                raise TypeError(
                    f"lowering returned shape {list(result.shape)}, "
                    f"expected {list(meta.shape)}"
                )
        elif (
            isinstance(result, (list, tuple))
            and isinstance(meta, (list, tuple))
            and len(result) != len(meta)
        ):
            raise TypeError(
                f"lowering returned {len(result)} values, expected {len(meta)}"
            )

    def _call(self, node: torch.fx.Node) -> Any:
        target = node.target
        if target in _SYM_FUNCTIONS:
            args = [self._resolve(a) for a in node.args]
            return _SYM_FUNCTIONS[target](*args)
        fn = _lookup(node)
        if fn is None:  # find_unsupported ran first; this guards direct use
            raise UnsupportedOpsError(find_unsupported([self.gm]))
        args, kwargs = self._arguments(node)
        with lowering_node(node, self.device_ref, self.twins):
            try:
                if is_pointwise(target):
                    result = self.twins.run_channels_last(
                        fn, args, kwargs, node.meta.get("val")
                    )
                else:
                    result = fn(*args, **kwargs)
                self._check_result(node, result)
            except LoweringError:
                raise
            except Exception as e:
                # Whatever the lowering raised, the node is named: in default
                # mode it then runs in PyTorch (fallback.settle).
                raise LoweringError(node, e) from e
        return result

    def _placeholder_value(self, node: torch.fx.Node) -> Any:
        meta = node.meta.get("val")
        if isinstance(meta, torch.Tensor):
            value = self.graph.inputs[self.input_of[node]]
            if node in self.mutated:
                # Read before any store: MAX orders buffer ops in graph order.
                return ops.buffer_load(value.buffer)
            return value.tensor
        if isinstance(meta, torch.SymInt):
            expr = meta.node.expr
            if expr in self.symbols:
                j, d = self.symbols[expr]
                return self.graph.inputs[
                    self.input_of[self.placeholders[j]]
                ].tensor.shape[d]
            raise MaxCompilerError(
                f"symbolic size input {node.name} ({expr}) is not the size of any "
                "tensor input"
            )
        if isinstance(meta, (int, float, bool)) or meta is None:
            raise MaxCompilerError(
                f"graph input {node.name} is a Python {type(meta).__name__}; "
                "torch-max-backend expects tensor and symbolic size inputs"
            )
        raise MaxCompilerError(f"graph input {node.name} of unsupported kind {meta!r}")

    # -- outputs --------------------------------------------------------------

    def _size_function(self, name: str, expr: sympy.Expr) -> Callable[[list], int]:
        """A function of the FX inputs computing ``expr`` from their sizes.

        A graph may return an expression of sizes (``s0 + 1``, ``s0 // 2``),
        for the code after it or for the backward; it is evaluated in Python at
        every call, which costs about a microsecond.
        """
        symbols = sorted(expr.free_symbols, key=str)
        unknown = [str(s) for s in symbols if s not in self.symbols]
        if unknown:
            raise MaxCompilerError(
                f"the graph returns the size expression {expr} ({name}), but "
                f"{', '.join(unknown)} is not the size of any tensor input"
            )
        # sympy's Python printer writes the expression with Python's own
        # operators (//, %, max), so it compiles to a plain lambda.
        source = PythonPrinter().doprint(expr)
        compute = eval(f"lambda {', '.join(map(str, symbols))}: {source}", {})
        places = [self.symbols[s] for s in symbols]

        def size(args: list) -> int:
            return int(compute(*(args[j].shape[d] for j, d in places)))

        return size

    def _output_slot(
        self, item: Any, graph_outputs: list[Any], seen: dict[int, int]
    ) -> OutputSlot:
        if item is None or isinstance(item, (int, float, bool)):
            return OutputSlot("const", value=item)
        if not isinstance(item, torch.fx.Node):
            raise MaxCompilerError(f"graph returns an unsupported value {item!r}")
        if item.op == "placeholder" and isinstance(item.meta.get("val"), torch.Tensor):
            return OutputSlot("input", self.placeholders.index(item))
        meta = item.meta.get("val")
        if isinstance(meta, torch.SymInt):
            expr = meta.node.expr
            if expr.is_number:
                return OutputSlot("const", value=int(expr))
            if expr in self.symbols:
                j, d = self.symbols[expr]
                return OutputSlot("dim", j, d)
            return OutputSlot("expr", value=self._size_function(item.name, expr))
        value = self.values[item]
        if not isinstance(value, TensorValue):
            raise MaxCompilerError(
                f"graph output {item.name} is a {type(value).__name__}, not a tensor"
            )
        key = id(value)
        if key not in seen:
            seen[key] = len(graph_outputs)
            graph_outputs.append(value)
        return OutputSlot("graph", seen[key])

    # -- driver ---------------------------------------------------------------

    def build(self) -> BuiltGraph:
        check_supported([self.gm])
        self._plan_inputs()
        self.graph = Graph(GRAPH_NAME, input_types=self.input_types)
        slots: list[OutputSlot] = []
        graph_outputs: list[Any] = []
        seen: dict[int, int] = {}
        with self.graph:
            for node in self.placeholders:
                self.values[node] = self._placeholder_value(node)
            if self.seed_index is not None:
                # Each random op then derives its own seed from this one.
                ops.random.set_seed(self.graph.inputs[self.seed_index].tensor)
            for node in self.gm.graph.nodes:
                if node.op == "get_attr":
                    if node in self.input_of:
                        self.values[node] = self.graph.inputs[
                            self.input_of[node]
                        ].tensor
                    else:
                        value = operator.attrgetter(node.target)(self.gm)
                        self.values[node] = ops.constant(
                            value.detach().cpu().numpy(),
                            to_max_dtype(value.dtype),
                            device=self.device_ref,
                        )
                elif node.op == "call_function":
                    if _writes_input(node, node.args[0]):
                        # AOTAutograd's epilogue for a mutated input: MAX stores
                        # the new value into the user's tensor itself.
                        result = self._call(node)
                        buffer = self.graph.inputs[self.input_of[node.args[0]]]
                        ops.buffer_store(buffer.buffer, result)
                        self.values[node] = result
                        continue
                    self.values[node] = self._call(node)
                elif node.op == "output":
                    items = node.args[0]
                    items = items if isinstance(items, (list, tuple)) else [items]
                    for item in items:
                        if isinstance(item, torch.fx.Node) and _writes_input(
                            item, item.args[0] if item.args else None
                        ):
                            slots.append(
                                OutputSlot(
                                    "input", self.placeholders.index(item.args[0])
                                )
                            )
                        else:
                            slots.append(self._output_slot(item, graph_outputs, seen))
                elif node.op != "placeholder":
                    raise MaxCompilerError(f"unsupported FX node kind {node.op!r}")
            self.graph.output(*graph_outputs)
        return BuiltGraph(
            graph=self.graph,
            device=self.device,
            inputs=self.inputs,
            outputs=slots,
            mutated=[self.placeholders.index(n) for n in self.mutated],
            num_graph_outputs=len(graph_outputs),
        )


def _writes_input(node: torch.fx.Node, target: Any) -> bool:
    """Whether ``node`` is AOTAutograd's copy of a new value into the tensor input ``target``."""
    return (
        node.op == "call_function"
        and node.target is torch.ops.aten.copy_.default
        and node.args[0] is target
        and isinstance(target, torch.fx.Node)
        and target.op == "placeholder"
        and isinstance(target.meta.get("val"), torch.Tensor)
    )


def build_graph(gm: torch.fx.GraphModule) -> BuiltGraph:
    return GraphBuilder(gm).build()


def is_size_arithmetic(node: torch.fx.Node) -> bool:
    """Python arithmetic on sizes, or indexing into an op's tuple result."""
    return node.op == "call_function" and node.target in _SYM_FUNCTIONS
