"""The node walk: each FX node's registered lowering called in graph order.

Placeholders read their planned MAX inputs, lifted scalars reach lowerings as
``ScalarArg`` inputs, every lowering's result is checked against torch's fake
tensor, and AOTAutograd's copies into mutated inputs become MAX buffer stores
(of one slot only where a KV cache gets one new position: slot_store), or,
past MAX_BUFFERS mutated inputs, outputs the runtime copies back; attention
reads K and V before transformers' repeat_kv copies them; index ranges start
at the graph's runtime zero where it has one (index_origin). What to do with
which node, the walk reads from the passes' findings (lower/passes/).
"""

from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass
from typing import Any

import torch
from max.dtype import DType
from max.graph import Graph, TensorValue, ops

from ...dtypes import to_max_dtype
from ...errors import LoweringError, MaxCompilerError, UnsupportedOpsError
from ...plan import GraphPlan
from ..checks import Checks, collecting
from ..context import lowering_node
from ..index_origin import IndexOrigin, building_with
from ..layout import ChannelsLastTwins, is_pointwise
from ..products import ProductForms, recording_products
from ..scalars import ScalarArg
from .capability import find_unsupported, lowering_of
from .channels_last_inputs import channels_last_value
from .flex_attention import lower_flex_attention
from .higher_order import (
    COND,
    FLEX_ATTENTION,
    HIGHER_ORDER,
    INVOKE_SUBGRAPH,
    inline_subgraph,
    lower_cond,
    lower_while_loop,
)
from .int_inputs import dims_as_operands, int_value, named_cause
from .optimizer_store import optimizer_step
from .outputs import OutputPlan
from .planning import InputPlan
from .result_check import check_result
from .slot_store import SharedBounds, store_slot
from .sym_numbers import SYM_TARGETS, number_op

# A fixed name: MAX's caches key on the graph text, name included.
GRAPH_NAME = "torch_max_graph"


@dataclass
class BuiltGraph:
    """A MAX graph, its plan, and the constant tensors its plan feeds as inputs."""

    graph: Graph
    plan: GraphPlan
    constants: list[torch.Tensor]
    # Whether its inputs end with an index origin (lower/index_origin.py).
    index_origin: bool = False
    # Multiply-adds of its largest product built as a sum for compile
    # time's sake over enough rows that MAX's matmul may run it faster
    # (lower/products.py), 0 for none: a matmul version may replace it later
    # (pipeline/product_upgrade.py).
    largest_upgradable_sum: int = 0

    @property
    def device(self) -> torch.device:
        return torch.device(self.plan.device)


class NodeWalk:
    """Builds one MAX graph from one FX ATen graph and its input plan."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        inputs: InputPlan,
        summed_products: bool = True,
    ) -> None:
        self.gm = gm
        self.inputs = inputs
        self.findings = inputs.findings
        self.values: dict[torch.fx.Node, Any] = {}
        self.twins = ChannelsLastTwins()
        # Values lowerings derive once per graph (context.derived_once).
        self.derived: dict[tuple, tuple] = {}
        # MAX input number -> the input rebound to its size expressions.
        self.rebound: dict[int, TensorValue] = {}
        self.graph = Graph(GRAPH_NAME, input_types=inputs.types)
        self.packed = inputs.packed_values(self.graph)
        # The slot kernel (kernels/mojo/slot_write.mojo) runs on the CPU.
        cpu = inputs.device.type == "cpu"
        self.slot_writes = self.findings.slot_writes if cpu else {}
        # The cache inputs they update in place, and the copy_ nodes they replace.
        self.written_in_place = {w.target for w in self.slot_writes.values()}
        self.done_write_backs = {w.write_back: n for n, w in self.slot_writes.items()}
        self.slot_bounds: SharedBounds = {}
        # Optimizer updates (CPU parameters only: passes/optimizer_updates.py)
        # run as one kernel at their last write-back: the nodes it replaces
        # are not lowered, their inputs not loaded.
        self.optimizer_updates = self.findings.optimizer_updates
        self.kernel_replaced = {
            n for u in self.optimizer_updates.values() for n in u.kernel_nodes
        }
        for update in self.optimizer_updates.values():
            self.written_in_place.update(update.inputs_written)
        origin = inputs.origin_index
        self.origin = IndexOrigin(
            None if origin is None else self.graph.inputs[origin].tensor
        )
        # Small products may be sums unless the graph mixed forms (products.py).
        self.products = ProductForms(sums_allowed=summed_products)

    def _input(self, index: int) -> Any:
        value = self.graph.inputs[index]
        if index in self.inputs.expression_sizes and index not in self.rebound:
            # Once, at the graph's start: every reader sees the sizes as the
            # expressions the rest of the graph computes (16*s0, not in3_d0).
            self.rebound[index] = self.inputs.rebound(index, value.tensor)
        return self.rebound.get(index, value)

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return self.values[value]
        if isinstance(value, (list, tuple)):
            return type(value)(self._resolve(v) for v in value)
        return value

    def _arguments(self, node: torch.fx.Node) -> tuple[list[Any], dict[str, Any]]:
        args = [self._resolve(a) for a in node.args]
        kwargs = {k: self._resolve(v) for k, v in node.kwargs.items()}
        for key, index, kind in self.inputs.scalars_of.get(node, ()):
            scalar = ScalarArg(self._input(index).tensor, kind)
            if isinstance(key, int):
                args[key] = scalar
            else:
                kwargs[key] = scalar
        for position, source in self.findings.repeated_kv.get(node, ()):
            args[position] = self.values[source]
        return args, kwargs

    def _call_in(self, node: torch.fx.Node, values: dict[torch.fx.Node, Any]) -> Any:
        """``node`` of a branch graph lowered over that branch's ``values``."""
        outer, self.values = self.values, values
        try:
            return self._call(node)
        finally:
            self.values = outer

    def _higher_order(self, node: torch.fx.Node) -> Any:
        """A node calling graphs of its own (higher_order.py), its inner nodes
        lowered by ``_call_in``."""
        values, call = self.values, self._call_in
        try:
            if node.target is COND:
                device = self.inputs.device_ref
                return lower_cond(node, self.gm, values, call, device)
            if node.target is INVOKE_SUBGRAPH:
                return inline_subgraph(node, self.gm, values, call)
            if node.target is FLEX_ATTENTION:
                return lower_flex_attention(node, values, call)
            return lower_while_loop(node, self.gm, values, call)
        except Exception as e:
            # Named after this node, which the graph holds (an inner node's
            # own error is the cause): the fallback then moves this node.
            raise LoweringError(node, e) from e

    def _call(self, node: torch.fx.Node) -> Any:
        target = node.target
        if target in HIGHER_ORDER:
            return self._higher_order(node)
        if target in SYM_TARGETS:
            args = [self._resolve(a) for a in node.args]
            try:
                return number_op(target, args, self.inputs.device_ref)
            except Exception as e:
                raise LoweringError(node, e) from e
        fn = lowering_of(node)
        if fn is None:  # the capability check ran first; this guards direct use
            raise UnsupportedOpsError(find_unsupported([self.gm]))
        args, kwargs = self._arguments(node)
        with self._building(node):
            try:
                dims_as_operands(node, fn, args, kwargs, self.inputs.device_ref)
                if is_pointwise(target):
                    result = self.twins.run_channels_last(
                        fn, args, kwargs, node.meta.get("val")
                    )
                else:
                    result = fn(*args, **kwargs)
                check_result(node, result)
            except LoweringError:
                raise
            except Exception as e:
                # Whatever the lowering raised, the node is named: in default
                # mode it then runs in PyTorch (fallback.settle).
                cause = named_cause(node, args, kwargs, e)
                raise LoweringError(node, cause) from cause
        return result

    def _store_slot(self, node: torch.fx.Node) -> Any:
        write = self.slot_writes[node]
        buffer = self._input(self.inputs.input_of[write.target]).buffer
        with self._building(node):
            try:
                return store_slot(
                    buffer,
                    write,
                    self.values[write.position],
                    self.values[write.source],
                    self.slot_bounds,
                )
            except Exception as e:
                raise LoweringError(node, e) from e

    def _building(self, node: torch.fx.Node) -> contextlib.AbstractContextManager:
        """The lowering context of ``node`` in this graph (context.py)."""
        return lowering_node(
            node,
            self.inputs.device_ref,
            self.twins,
            self.findings.constants.frontier,
            self.derived,
            self.packed,
        )

    def _optimizer_step(self, node: torch.fx.Node) -> None:
        update = self.optimizer_updates[node]
        buffers = tuple(
            self._input(self.inputs.input_of[n]).buffer for n in update.inputs_written
        )
        with self._building(node):
            try:
                numbers = self.inputs.numbers_of.get(node)
                # Read as the graph takes it where the update's operands
                # all are (channels_last_inputs.py).
                # A gradient the kernel writes is one of ``buffers``.
                grad = None if update.grad_written else self.values[update.grad]
                if grad is not None and node in self.inputs.raw_updates:
                    grad = self._input(self.inputs.input_of[update.grad]).tensor
                optimizer_step(
                    update,
                    buffers,
                    grad,
                    self.values,
                    None if numbers is None else self._input(numbers).tensor,
                )
            except Exception as e:
                raise LoweringError(node, e) from e

    def _placeholder_value(self, node: torch.fx.Node) -> Any:
        meta = node.meta.get("val")
        plan = self.inputs
        if isinstance(meta, torch.Tensor):
            value = self._input(plan.input_of[node])
            if node in self.written_in_place:
                return None  # read only through its slot write (slot_writes)
            if node in plan.buffered:
                # Read before any store: MAX orders buffer ops in graph order.
                return ops.buffer_load(value.buffer)
            if node in plan.channels_last:
                # Taken as N, *spatial, C (channels_last_inputs.py): its twin.
                last = channels_last_value(value.tensor, meta)
                return self.twins.channels_first(last)
            return value.tensor
        if isinstance(meta, torch.SymInt):
            return int_value(node, plan, lambda i: self._input(i).tensor)
        if isinstance(meta, (int, float, bool)) or meta is None:
            raise MaxCompilerError(
                f"graph input {node.name} is a Python {type(meta).__name__}; "
                "torch-max-backend expects tensor and symbolic size inputs"
            )
        raise MaxCompilerError(f"graph input {node.name} of unsupported kind {meta!r}")

    def _attribute_value(self, node: torch.fx.Node) -> Any:
        if node in self.inputs.input_of:
            return self._input(self.inputs.input_of[node]).tensor
        value = operator.attrgetter(node.target)(self.gm)
        if isinstance(value, torch.fx.GraphModule):
            return value  # a branch of cond, which lower_cond reads
        # An empty tensor: nothing to feed, so a constant costs no compile.
        held = value.detach().cpu()
        if held.dtype == torch.bfloat16:
            # numpy has no bfloat16; float32 holds each value exactly.
            as_float32 = ops.constant(
                held.float().numpy(), DType.float32, device=self.inputs.device_ref
            )
            return ops.cast(as_float32, DType.bfloat16)
        return ops.constant(
            held.numpy(), to_max_dtype(value.dtype), device=self.inputs.device_ref
        )

    def _outputs(self, node: torch.fx.Node, outputs: OutputPlan) -> None:
        items = node.args[0]
        items = items if isinstance(items, (list, tuple)) else [items]
        for item in items:
            if (
                isinstance(item, torch.fx.Node)
                and item in self.findings.mutations.copies
            ):
                outputs.add_input(item.args[0])
            else:
                outputs.add(item, self.values)

    def run(self) -> BuiltGraph:
        plan = self.inputs
        outputs = OutputPlan(
            plan.placeholders,
            plan.symbols,
            self.findings.eager_layouts,
            plan.int_symbols,
        )
        checks = Checks()
        with (
            self.graph,
            building_with(self.origin),
            recording_products(self.products),
            collecting(checks),
        ):
            for node in plan.placeholders:
                self.values[node] = self._placeholder_value(node)
            if plan.seed_index is not None:
                # Each random op then derives its own seed from this one.
                ops.random.set_seed(self._input(plan.seed_index).tensor)
            for node in self.gm.graph.nodes:
                if node.op == "get_attr":
                    self.values[node] = self._attribute_value(node)
                elif node in self.findings.constants.folded:
                    # Computed by PyTorch at planning (folding): the values
                    # other nodes read are inputs, the rest is read by no one.
                    if node in plan.input_of:
                        self.values[node] = self._input(plan.input_of[node]).tensor
                elif node in self.slot_writes:
                    self.values[node] = self._store_slot(node)
                elif node in self.optimizer_updates:
                    self._optimizer_step(node)
                elif node in self.kernel_replaced:
                    pass  # computed by its update's kernel (_optimizer_step)
                elif node in self.done_write_backs:
                    self.values[node] = self.values[self.done_write_backs[node]]
                elif node.op == "call_function":
                    writes = node in self.findings.mutations.copies
                    result = self._call(node)
                    if writes and node.args[0] in plan.buffered:
                        # AOTAutograd's epilogue for a mutated input: MAX stores
                        # the new value into the user's tensor itself.
                        buffer = self._input(plan.input_of[node.args[0]])
                        ops.buffer_store(buffer.buffer, result)
                    elif writes:
                        outputs.write_back(node.args[0], result)
                    self.values[node] = result
                elif node.op == "output":
                    self._outputs(node, outputs)
                elif node.op != "placeholder":
                    raise MaxCompilerError(f"unsupported FX node kind {node.op!r}")
            flags = checks.output()
            check_output = len(outputs.graph_outputs) if flags is not None else -1
            if flags is not None:
                outputs.graph_outputs.append(flags)
            self.graph.output(*outputs.graph_outputs)
        return BuiltGraph(
            graph=self.graph,
            plan=GraphPlan(
                device=str(plan.device),
                inputs=tuple(plan.sources),
                outputs=tuple(outputs.slots),
                mutated=tuple(plan.placeholders.index(n) for n in plan.buffered),
                num_graph_outputs=len(outputs.graph_outputs),
                written_back=tuple(outputs.written_back),
                checks=tuple(checks.checks),
                check_output=check_output,
            ),
            constants=plan.constants,
            index_origin=plan.origin_index is not None,
            largest_upgradable_sum=self.products.largest_upgradable_sum,
        )
