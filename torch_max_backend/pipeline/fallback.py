"""Graphs with ops MAX cannot run: MAX blocks with PyTorch ops between them.

torch.fx's capability-based partitioner groups the supported ops into
maximal blocks that keep the graph acyclic; each block of at least
``min_block_size`` ops becomes one MAX graph, and every other op runs in
PyTorch exactly as it would eagerly. Values cross the boundary as torch
tensors through DLPack, so dtypes, devices and aliasing stay PyTorch's.

A node runs in PyTorch when no lowering covers it, when ``torch_executed_ops``
names it, or when its lowering raised while the graph was being built:
``settle`` builds (cheap) before anything is compiled (20 s or more a graph),
so a broken lowering costs a PyTorch op, not the user's model.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_as_graphmodule, topo_sort

from .. import logs
from ..errors import LoweringError, MaxCompilerError, describe_value, first_line
from ..lower.builder import STANDS_FOR, is_size_arithmetic, why_unsupported
from ..settings import Settings
from .handoff import keep_eager_layouts

logger = logging.getLogger(__name__)


class FallbackWarning(UserWarning):
    """Some ops of a compiled graph run in PyTorch instead of MAX."""


def forced_to_torch(node: torch.fx.Node, names: frozenset[str]) -> bool:
    """Whether ``torch_executed_ops`` names the op of ``node``."""
    if not names or node.op != "call_function":
        return False
    target = node.target
    if str(target) in names:
        return True
    packet = getattr(target, "overloadpacket", None)
    if packet is not None and str(packet) in names:
        return True
    # A rewrite's node (lower/passes/) runs where the ops it replaced would.
    return bool(STANDS_FOR.get(target, frozenset()) & names)


def torch_reason(node: torch.fx.Node, settings: Settings) -> str | None:
    """Why ``node`` must run in PyTorch, or None when MAX can run it."""
    why = why_unsupported(node)
    if why is not None:
        return why[2] or "no MAX lowering"
    if forced_to_torch(node, settings.torch_executed_ops):
        return "listed in torch_executed_ops"
    return None


@dataclass
class Placement:
    """Where the nodes of one graph run: on MAX unless a reason says PyTorch."""

    settings: Settings
    # Node name -> why its lowering failed; such nodes run in PyTorch.
    failed: dict[str, str] = field(default_factory=dict)

    def reason(self, node: torch.fx.Node) -> str | None:
        """Why ``node`` must run in PyTorch, or None when MAX runs it."""
        failure = self.failed.get(node.name)
        if failure is not None and node.op == "call_function":
            return failure
        return torch_reason(node, self.settings)

    def fail(self, gm: torch.fx.GraphModule, error: LoweringError) -> None:
        """Move the node whose lowering raised ``error`` to PyTorch.

        Other nodes of the same op with the same arguments (the layers of a
        model) would fail the same way; they move too, which saves a build
        per layer.
        """
        failed = error.node
        cause = error.__cause__ or error
        reason = (
            f"its lowering failed at node {failed.name} "
            f"({_arguments_text(failed)}): {type(cause).__name__}: "
            f"{first_line(cause)}"
        )
        logger.info("graph node %s runs in PyTorch: %s", failed.name, reason)
        signature = _signature(failed)
        for node in gm.graph.nodes:
            if node.name == failed.name or (
                node.op == "call_function" and _signature(node) == signature
            ):
                self.failed[node.name] = reason


def _arguments_text(node: torch.fx.Node) -> str:
    args = [describe_value(a) for a in node.args]
    args += [f"{k}={describe_value(v)}" for k, v in node.kwargs.items()]
    return ", ".join(args)


def _signature(node: torch.fx.Node) -> tuple[object, str]:
    return node.target, _arguments_text(node)


def needs_torch(gm: torch.fx.GraphModule, placement: Placement) -> bool:
    return any(placement.reason(n) is not None for n in gm.graph.nodes)


class _MaxSupport(OperatorSupportBase):
    def __init__(self, placement: Placement) -> None:
        super().__init__()
        self.placement = placement

    def is_node_supported(
        self, submodules: dict[str, torch.nn.Module], node: torch.fx.Node
    ) -> bool:
        return node.op == "call_function" and self.placement.reason(node) is None


def op_count(nodes: Any) -> int:
    """ATen ops in a block; size arithmetic and tuple indexing are free."""
    return sum(
        1 for n in nodes if n.op == "call_function" and not is_size_arithmetic(n)
    )


def partitioner(
    gm: torch.fx.GraphModule, placement: Placement
) -> CapabilityBasedPartitioner:
    """The partitioner grouping the ops of ``gm`` that MAX runs into blocks."""
    return CapabilityBasedPartitioner(
        gm, _MaxSupport(placement), allows_single_node_partition=True
    )


def _max_partitions(
    blocks: CapabilityBasedPartitioner, min_block_size: int
) -> tuple[list[Partition], int]:
    """The blocks that become MAX graphs, and how many were too small."""
    partitions: list[Partition] = blocks.propose_partitions()
    kept = [p for p in partitions if op_count(p.nodes) >= min_block_size]
    sized = [p for p in partitions if op_count(p.nodes) > 0]
    return kept, len(sized) - len(kept)


def settle(
    gm: torch.fx.GraphModule,
    placement: Placement,
    build: Callable[[torch.fx.GraphModule], Any],
) -> Any:
    """Build ``gm``, or each of its MAX blocks, until every build succeeds.

    A node whose lowering raises moves to PyTorch (``placement.fail``) and the
    blocks are formed again; in strict mode the ``LoweringError`` is raised.
    Returns what ``build`` made of the whole graph when all of it runs on
    MAX, else None (the blocks are split off for good and compiled then;
    ``build`` may keep what it made of them).
    """
    while True:
        try:
            if not needs_torch(gm, placement):
                return build(gm)
            blocks = partitioner(gm, placement)
            kept, _ = _max_partitions(blocks, placement.settings.min_block_size)
            for partition in kept:
                block, _, _ = fuse_as_graphmodule(
                    gm, topo_sort(list(partition.nodes)), "trial_block"
                )
                try:
                    build(block)
                except LoweringError:
                    raise
                except MaxCompilerError:
                    # Not one node's fault: compiling the block fails the
                    # same way, and the block then runs in PyTorch.
                    continue
            return None
        except LoweringError as e:
            if placement.settings.strict or e.node.name in placement.failed:
                raise
            placement.fail(gm, e)


@dataclass
class SplitReport:
    """What one split graph runs where."""

    graph: str
    # op name -> (count, reason) for ops that run in PyTorch.
    torch_ops: dict[str, list[Any]] = field(default_factory=dict)
    max_blocks: int = 0
    small_blocks: int = 0
    failed_blocks: list[str] = field(default_factory=list)

    def message(self, min_block_size: int) -> str:
        listed = ", ".join(
            f"{name} x{count} ({reason})"
            for name, (count, reason) in sorted(self.torch_ops.items())
        )
        # Ops are listed when placement refused them by name; a graph whose
        # blocks alone failed (or were too small) refused none.
        head = (
            f"runs {listed} in PyTorch"
            if listed
            else "has no op refused by MAX, yet runs in part in PyTorch"
        )
        text = (
            f"torch-max-backend: graph {self.graph} {head}; "
            f"{self.max_blocks} block(s) run on MAX"
        )
        if self.small_blocks:
            text += (
                f", {self.small_blocks} block(s) of fewer than {min_block_size} "
                "ops run in PyTorch (min_block_size)"
            )
        for failure in self.failed_blocks:
            text += f"; a block MAX could not take runs in PyTorch: {failure}"
        return text + ". Pass options={'strict': True} to raise instead."


class _MaxBlock(torch.nn.Module):
    """One fused block of the split graph, run by its compiled MAX graph."""

    def __init__(self, compiled: Callable[[list], list], returns_tuple: bool) -> None:
        super().__init__()
        self.compiled = compiled
        self.returns_tuple = returns_tuple

    def forward(self, *args: Any) -> Any:
        outputs = self.compiled(list(args))
        return tuple(outputs) if self.returns_tuple else outputs[0]


def _returns_tuple(gm: torch.fx.GraphModule) -> bool:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return isinstance(out.args[0], (tuple, list))


def start_split(
    gm: torch.fx.GraphModule,
    placement: Placement,
    name: str,
    compile_block: Callable[[torch.fx.GraphModule, str], Future],
) -> Callable[[], tuple[torch.fx.GraphModule, SplitReport]]:
    """Start making ``gm`` with each large enough supported block replaced
    by its MAX graph: every block's compile is started here, and the returned
    function waits for them and gives the split graph and its report.

    ``compile_block(block, block_name)`` starts compiling one block and
    returns a future of its callable; a block it refuses with
    ``MaxCompilerError`` (at once or from the future) runs in PyTorch and is
    named in the report.
    """
    settings = placement.settings
    report = SplitReport(name)
    blocks = partitioner(gm, placement)
    kept, report.small_blocks = _max_partitions(blocks, settings.min_block_size)
    in_blocks = {n for p in kept for n in p.nodes}
    counts: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    for node in gm.graph.nodes:
        reason = placement.reason(node)
        if reason is not None and node.op == "call_function":
            counts[str(node.target)] += 1
            reasons.setdefault(str(node.target), reason)
        elif (
            node.op == "call_function"
            and node not in in_blocks
            and not is_size_arithmetic(node)
        ):
            counts[str(node.target)] += 1
            reasons.setdefault(str(node.target), "in a small block")
    report.torch_ops = {k: [counts[k], reasons[k]] for k in counts}
    split = blocks.fuse_partitions(kept, prefix="max_block_")
    # Every block's compile starts before any is waited for: they compile
    # together (runtime/module_batch.py) or side by side in compile workers.
    started: list[tuple[str, torch.fx.GraphModule, Future | MaxCompilerError]] = []
    for node in list(split.graph.nodes):
        if node.op != "call_module" or not str(node.target).startswith("max_block_"):
            continue
        block = getattr(split, node.target)
        block_name = f"{name}.{node.target.removeprefix('max_block_')}"
        try:
            started.append((node.target, block, compile_block(block, block_name)))
        except MaxCompilerError as e:
            started.append((node.target, block, e))

    def finish() -> tuple[torch.fx.GraphModule, SplitReport]:
        for target, block, compiling in started:
            try:
                if isinstance(compiling, MaxCompilerError):
                    raise compiling
                compiled = compiling.result()
            except MaxCompilerError as e:
                if settings.strict:
                    raise
                report.failed_blocks.append(first_line(e))
                continue
            setattr(split, target, _MaxBlock(compiled, _returns_tuple(block)))
            report.max_blocks += 1
        keep_eager_layouts(split)
        split.recompile()
        return split, report

    return finish


def warn(report: SplitReport, settings: Settings) -> None:
    logs.warn(
        report.message(settings.min_block_size),
        FallbackWarning,
        logger="fallback",
        stacklevel=2,
    )
