"""Planning a graph's inputs: its device, and where every MAX input comes from.

Tensor inputs keep their FX order; graph attributes and the Python scalars of
ops that lift them become inputs too (never baked constants: MAX's compile
cache keys on the graph text, so a baked value would make every new value a
new compile); a graph with random ops takes a seed input.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import sympy
import torch
from max.graph import BufferType, DeviceRef, Dim, Graph, TensorType, TensorValue, ops

from ...dtypes import to_device_ref, to_max_dtype
from ...errors import MaxCompilerError
from ...kernels.weight_packing import packed_length
from ...plan import InputKind, InputSource
from ..opmath import HALF
from ..packed_products import FROZEN_WEIGHTS, packed_weight
from ..passes import GraphFindings, OptimizerUpdate
from ..product_choice import PACKED
from ..registry import draws_random, lifts_scalars
from ..shapes import expression_dim, max_dim
from .capability import lowering_of, strategy_of
from .channels_last_inputs import raw_updates, taken_shape, takes_channels_last
from .device import graph_device
from .int_inputs import (
    carrier_type,
    int_input_kind,
    number_type,
    sized_symbols,
    takes_number,
)
from .optimizer_store import update_numbers

# The seed input's metadata: one int64.
_SEED_META = torch.empty((1,), dtype=torch.int64)


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


class InputPlan:
    """The MAX inputs of one FX graph: their types and their sources."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        findings: GraphFindings,
        index_origin: bool = False,
        channels_last_views: bool = True,
    ) -> None:
        self.gm = gm
        # Channels-last inputs taken as such (channels_last_inputs.py): the
        # placeholders so taken.
        self.channels_last_views = channels_last_views
        self.channels_last: set[torch.fx.Node] = set()
        # The optimizer updates whose operands are all taken so.
        self.raw_updates: dict[torch.fx.Node, OptimizerUpdate] = {}
        self.findings = findings
        self.device = graph_device(gm)
        self.device_ref: DeviceRef = to_device_ref(self.device)
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.types: list[TensorType | BufferType] = []
        self.sources: list[InputSource] = []
        # Constant tensors (graph attributes, lifted scalars) fed as inputs.
        self.constants: list[torch.Tensor] = []
        self.seed_index: int | None = None
        # The runtime zero that index ranges start at (lower/index_origin.py).
        self.origin_index: int | None = None
        # FX node -> MAX input number, for tensor placeholders and constants.
        self.input_of: dict[torch.fx.Node, int] = {}
        # node -> (argument position or name, MAX input number, Python type) of
        # each lifted scalar of that node.
        self.scalars_of: dict[torch.fx.Node, list[tuple[int | str, int, type]]] = {}
        # An optimizer update's last write-back -> the MAX input number of its
        # plain numbers (builder/optimizer_store.py).
        self.numbers_of: dict[torch.fx.Node, int] = {}
        # sympy symbol -> (FX input index, dim), for symbolic sizes.
        self.symbols: dict[sympy.Symbol, tuple[int, int]] = {}
        # Symbolic int inputs that are no tensor's size (int_inputs.py): the
        # node -> its MAX carrier input, and its symbol -> its FX input index.
        self.int_input_of: dict[torch.fx.Node, int] = {}
        # Those the graph uses only as numbers: the node -> its value's input.
        self.number_input_of: dict[torch.fx.Node, int] = {}
        self.int_symbols: dict[sympy.Symbol, int] = {}
        # MAX input number -> {dim: (its size expression, where)}, for inputs
        # whose sizes are expressions of other inputs' symbols.
        self.expression_sizes: dict[int, dict[int, tuple[sympy.Expr, str]]] = {}
        # Products that read a packed weight -> its MAX input number.
        self.packed_of: dict[torch.fx.Node, int] = {}
        self._kernel_nodes = {
            n for u in findings.optimizer_updates.values() for n in u.kernel_nodes
        }
        self._plan()
        if index_origin:
            zero = torch.zeros((), dtype=torch.int64)
            self.origin_index = self._add_constant(
                zero, zero, "index origin", DeviceRef.CPU()
            )

    @property
    def buffered(self) -> tuple[torch.fx.Node, ...]:
        """Tensor inputs the graph writes in place as MAX buffers; the other
        mutated inputs are written back (passes/mutations.py)."""
        return self.findings.mutations.buffered

    def _add(
        self,
        source: InputSource,
        meta: torch.Tensor,
        where: str,
        mutable: bool = False,
        device_ref: DeviceRef | None = None,
        taken: Sequence[int | torch.SymInt] | None = None,
    ) -> int:
        """The MAX input for ``source``: ``meta``'s dtype, and its shape or
        the ``taken`` one (a channels-last input's)."""
        index = len(self.sources)
        shape: list[int | str] = []
        for d, size in enumerate(meta.shape if taken is None else taken):
            expr = size.node.expr if isinstance(size, torch.SymInt) else None
            if expr is None or expr.is_Symbol or expr.is_number:
                shape.append(max_dim(size, where))
                continue
            # A size such as ``16*s0`` (a view's saved for backward): MAX takes
            # plain dims as inputs, so the input gets a dim of its own, which
            # the graph rebinds to the expression (checked at run time).
            if mutable:
                max_dim(size, where)  # raises: a buffer is not rebound
            self.expression_sizes.setdefault(index, {})[d] = (expr, where)
            shape.append(f"in{index}_d{d}")
        kind = BufferType if mutable else TensorType
        device = device_ref or self.device_ref
        self.types.append(kind(to_max_dtype(meta.dtype), shape, device))
        self.sources.append(source)
        return len(self.sources) - 1

    def _check_expression_sizes(self) -> None:
        """Refuse an input size expression that MAX cannot compute from the
        dims the graph's inputs name (a symbol no input carries as a plain
        size, or a form other than + - * //)."""
        for sizes in self.expression_sizes.values():
            for expr, where in sizes.values():
                if self.named_dim(expr) is None:
                    raise MaxCompilerError(
                        f"{where} has a size given by the expression {expr}, "
                        "which no other input's plain sizes determine; "
                        "torch-max-backend takes such sizes only as expressions "
                        "of symbols that an input carries"
                    )

    def named_dim(self, expr: sympy.Expr) -> Dim | None:
        """``expr`` as a MAX dim of the symbols the inputs carry as dims
        (tensor sizes and int carriers); None when it needs another."""
        named = set(self.symbols) | {n.meta["val"].node.expr for n in self.int_input_of}
        return expression_dim(expr) if expr.free_symbols <= named else None

    def rebound(self, index: int, value: TensorValue) -> TensorValue:
        """MAX input ``index`` rebound to its size expressions, checked at
        run time."""
        sizes = self.expression_sizes[index]
        shape = [
            self.named_dim(sizes[d][0]) if d in sizes else dim
            for d, dim in enumerate(value.shape)
        ]
        message = f"input {index}'s sizes differ from the traced {shape}"
        return ops.rebind(value, shape, message)

    def _add_constant(
        self,
        tensor: torch.Tensor,
        meta: torch.Tensor,
        where: str,
        device_ref: DeviceRef | None = None,
    ) -> int:
        self.constants.append(tensor)
        source = InputSource(InputKind.CONSTANT, len(self.constants) - 1)
        return self._add(source, meta, where, device_ref=device_ref)

    def _plan(self) -> None:
        # Nodes no MAX op reads an input for: PyTorch's at planning, or our
        # optimizer kernels'.
        computed = self._kernel_nodes | self.findings.constants.folded
        # Written inputs are taken channels-last only where our optimizer
        # kernel alone writes them (channels_last_inputs.py).
        unmoved = set(self.findings.mutations.mutated)
        if self.channels_last_views:
            self.raw_updates = raw_updates(self.findings.optimizer_updates)
            for update in self.raw_updates.values():
                unmoved -= set(update.written)
        for i, node in enumerate(self.placeholders):
            meta = node.meta.get("val")
            if isinstance(meta, torch.Tensor):
                if (
                    self.channels_last_views
                    and node not in unmoved
                    and takes_channels_last(meta)
                ):
                    self.channels_last.add(node)
                    source = InputSource(InputKind.CHANNELS_LAST, i)
                    taken = taken_shape(meta)
                else:
                    source, taken = InputSource(InputKind.FX_INPUT, i), None
                self.input_of[node] = self._add(
                    source,
                    meta,
                    f"input {node.name}",
                    mutable=node in self.buffered,
                    taken=taken,
                )
                for d, size in enumerate(meta.shape):
                    if isinstance(size, torch.SymInt) and isinstance(
                        size.node.expr, sympy.Symbol
                    ):
                        self.symbols.setdefault(size.node.expr, (i, d))
        sized = sized_symbols(self.gm)
        for i, node in enumerate(self.placeholders):
            meta = node.meta.get("val")
            kind = int_input_kind(meta, self.symbols, sized)
            if kind is InputKind.INT:
                self.types.append(carrier_type(meta, node.name, self.device_ref))
                self.int_input_of[node] = len(self.sources)
            elif kind is InputKind.NUMBER:
                self.types.append(number_type(self.device_ref))
                self.number_input_of[node] = len(self.sources)
            else:
                continue
            self.sources.append(InputSource(kind, i))
            self.int_symbols[meta.node.expr] = i
        self._check_expression_sizes()
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                value = operator.attrgetter(node.target)(self.gm)
                if isinstance(value, torch.fx.GraphModule):
                    continue  # a branch of cond: lowered where it is called
                if not isinstance(value, torch.Tensor):
                    raise MaxCompilerError(
                        f"graph attribute {node.target!r} is a "
                        f"{type(value).__name__}, not a tensor"
                    )
                if value.numel() > 0:
                    # A graph input, not a baked constant: the compiled graph
                    # then stays the same whatever the constant's value.
                    self.input_of[node] = self._add_constant(
                        value.detach().to(self.device), value, f"constant {node.target}"
                    )
            elif node in self.findings.constants.folded:
                # Computed by PyTorch at planning (passes/folding.py).
                value = self.findings.constants.frontier.get(node)
                # Read by optimizer kernels alone, it would be an input
                # nothing reads (a lerp's weight, its sign test).
                if value is not None and not set(node.users) <= computed:
                    self.input_of[node] = self._add_constant(
                        value.to(self.device), value, f"constant {node.name}"
                    )
            elif node in self._kernel_nodes:
                # Computed by an optimizer kernel, which reads the numbers it
                # needs from the update's own input (numbers_of): lifted, they
                # would be inputs nothing reads, passed at every call.
                continue
            elif node.op == "call_function":
                self._plan_scalars(node)
                fn = lowering_of(node)
                if fn is not None and draws_random(fn) and self.seed_index is None:
                    self.seed_index = self._add(
                        InputSource(InputKind.SEED), _SEED_META, "random seed"
                    )
        for at, update in self.findings.optimizer_updates.items():
            numbers = update_numbers(update)
            if numbers:
                value = torch.tensor(numbers, dtype=torch.float32, device=self.device)
                self.numbers_of[at] = self._add_constant(
                    value, value, f"numbers of the update at {at.name}"
                )
        self._plan_packed()

    def _plan_packed(self) -> None:
        """An input for each weight that products read packed (frozen weights,
        lower/packed_products.py): one per weight and packing, made from the
        weight by the call path."""
        if not self.gm.meta.get(FROZEN_WEIGHTS):
            return
        made: dict[tuple[int, tuple[int, ...]], int] = {}
        for node in self.gm.graph.nodes:
            if node.op != "call_function" or strategy_of(node) != PACKED:
                continue
            weight, spec = packed_weight(node)
            key = (self.placeholders.index(weight), tuple(spec.as_list()))
            if key not in made:
                length = packed_length(spec)
                meta = torch.empty(length, dtype=torch.float32, device="meta")
                source = InputSource(InputKind.PACKED, *key)
                made[key] = self._add(source, meta, f"packed weight {weight.name}")
            self.packed_of[node] = made[key]

    def packed_values(self, graph: Graph) -> dict[torch.fx.Node, TensorValue]:
        """Each product reading a packed weight -> that input of ``graph``."""
        return {n: graph.inputs[i].tensor for n, i in self.packed_of.items()}

    def _plan_scalars(self, node: torch.fx.Node) -> None:
        fn = lowering_of(node)
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
            if not takes_number(arg) or type(value) not in (bool, int, float):
                continue
            if first_tensor is not None:
                dtype = torch.result_type(
                    torch.empty((1,), dtype=first_tensor.dtype), value
                )
            else:
                meta = _first_tensor_meta([node])
                dtype = meta.dtype if meta is not None else torch.tensor(value).dtype
            if dtype in HALF and node.target in _FLOAT32_NUMBERS:
                dtype = torch.float32
            if arg.name in _OPERANDS and _wraps_around(node, value, dtype):
                # 300 with an int8 tensor: the lowering's own promotion casts
                # it (wrapping around, as eager: 44 for a product, 300 for
                # a true division). Elsewhere (clamp's bounds, a fill value,
                # alpha) eager refuses it, as torch.tensor below does.
                dtype = torch.int64
            tensor = torch.tensor(value, dtype=dtype, device=self.device)
            index = self._add_constant(tensor, tensor, f"scalar of {node.name}")
            self.scalars_of.setdefault(node, []).append((key, index, type(value)))


# torch's kernels multiply and divide a half-precision tensor by a number
# taken as a float32 (x * 0.1 in bfloat16 is float32 0.1 times x, rounded
# once), where add and sub round the number (and alpha) to the tensor's
# dtype first: a number of these ops is lifted as float32, and their
# lowerings compute in float32 (opmath).
_FLOAT32_NUMBERS = (
    torch.ops.aten.mul.Tensor,
    torch.ops.aten.mul.Scalar,
    torch.ops.aten.div.Tensor,
    torch.ops.aten.div.Scalar,
    torch.ops.aten.true_divide.Tensor,
)

# A binary op's operands: a number there is the other operand (`i * 300`,
# `torch.pow(300, i)`, `300 % i`), not a bound or a fill value.
_OPERANDS = ("self", "other")


def _wraps_around(node: torch.fx.Node, value: object, dtype: torch.dtype) -> bool:
    """Whether a Python int is a binary op's operand out of a (narrower)
    integer dtype's range, which eager casts with wrap-around; ``where``
    refuses one, as a fill does."""
    if type(value) is not int or dtype.is_floating_point or dtype == torch.bool:
        return False
    if getattr(node.target, "overloadpacket", None) is torch.ops.aten.where:
        return False  # where.ScalarSelf, ScalarOther and Scalar
    info = torch.iinfo(dtype)
    return not info.min <= value <= info.max
