"""``explain``: what max_backend would do with a model, without running it on MAX.

The model runs once in PyTorch under Dynamo and AOTAutograd with the same
decompositions max_backend uses; the ATen graphs they produce are inspected,
not compiled: every op with its count and whether MAX can run it (and why
not), the MAX blocks a split would form, and Dynamo's graph breaks.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from tabulate import tabulate
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .errors import MaxCompilerError
from .lower.builder import build_graph, is_size_arithmetic, rewritten, strategy_of
from .lower.conv_choice import set_conv_strategy
from .lower.families import register_families
from .lower.packed_products import mark_frozen
from .lower.product_choice import set_product_strategy
from .lower.registry import decomposition_table
from .pipeline.fallback import Placement, op_count, partitioner, settle
from .settings import Settings


@dataclass
class OpReport:
    op: str
    count: int
    on_max: bool
    reason: str = ""
    # For an op lowered by one of several strategies: how many of its nodes
    # each strategy builds.
    strategies: dict[str, int] = field(default_factory=dict)


@dataclass
class GraphReport:
    name: str
    ops: list[OpReport]
    # ATen ops in each block of ops MAX can run, in graph order.
    blocks: list[int]
    min_block_size: int

    @property
    def max_blocks(self) -> list[int]:
        """The blocks that would become MAX graphs (the rest run in PyTorch)."""
        if all(op.on_max for op in self.ops):
            return [sum(op.count for op in self.ops)]
        return [b for b in self.blocks if b >= self.min_block_size]


@dataclass
class GraphBreak:
    reason: str
    where: str


@dataclass
class ExplainReport:
    graphs: list[GraphReport] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)

    @property
    def unsupported(self) -> dict[str, int]:
        """Ops that would run in PyTorch, with their counts over all graphs."""
        counts: Counter[str] = Counter()
        for graph in self.graphs:
            for op in graph.ops:
                if not op.on_max:
                    counts[op.op] += op.count
        return dict(counts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "graphs": [{**asdict(g), "max_blocks": g.max_blocks} for g in self.graphs],
            "graph_breaks": [asdict(b) for b in self.graph_breaks],
            "unsupported": self.unsupported,
        }

    def table(self) -> str:
        parts = []
        for graph in self.graphs:
            rows = [
                [
                    op.op,
                    op.count,
                    "MAX" if op.on_max else "PyTorch",
                    ", ".join(f"{s} x{n}" for s, n in op.strategies.items()),
                    op.reason,
                ]
                for op in graph.ops
            ]
            blocks = ", ".join(str(b) for b in graph.max_blocks) or "none"
            parts.append(
                f"{graph.name}: {sum(op.count for op in graph.ops)} ATen ops, "
                f"MAX blocks of {blocks} op(s)\n"
                + tabulate(
                    rows, headers=["op", "count", "runs on", "strategy", "why not MAX"]
                )
            )
        if self.graph_breaks:
            parts.append(
                f"{len(self.graph_breaks)} graph break(s):\n"
                + tabulate(
                    [[b.reason, b.where] for b in self.graph_breaks],
                    headers=["reason", "where"],
                )
            )
        else:
            parts.append("no graph breaks")
        return "\n\n".join(parts)

    def __str__(self) -> str:
        return self.table()


def _graph_report(
    gm: torch.fx.GraphModule, name: str, settings: Settings
) -> GraphReport:
    # The graph max_backend builds: after the FX passes' rewrites (RMS
    # norms as one node, sibling products grouped).
    gm = rewritten(gm)
    mark_frozen(gm, name.partition("_")[0], settings.frozen_weights)
    # Lowerings that raise are found by building the MAX graphs (not
    # compiling them), as max_backend decides before it compiles.
    placement = Placement(replace(settings, strict=False))
    try:
        with unset_fake_temporarily():
            settle(gm, placement, build_graph)
    except MaxCompilerError:
        pass  # not one node's fault: max_backend would run the graph in PyTorch
    counts: Counter[str] = Counter()
    reasons: dict[str, str | None] = {}
    strategies: dict[str, Counter[str]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or is_size_arithmetic(node):
            continue
        key = str(node.target)
        counts[key] += 1
        reason = placement.reason(node)
        if reason is not None or key not in reasons:
            reasons[key] = reason
        strategy = strategy_of(node) if reason is None else None
        if strategy is not None:
            strategies.setdefault(key, Counter())[strategy] += 1
    ops = [
        OpReport(
            op,
            count,
            reasons[op] is None,
            reasons[op] or "",
            dict(strategies.get(op, {})),
        )
        for op, count in sorted(counts.items())
    ]
    blocks = [
        op_count(p.nodes) for p in partitioner(gm, placement).propose_partitions()
    ]
    return GraphReport(name, ops, [b for b in blocks if b], settings.min_block_size)


def explain(
    model: Callable[..., Any],
    *example_inputs: Any,
    options: dict[str, Any] | None = None,
    training: bool = False,
    **example_kwargs: Any,
) -> ExplainReport:
    """Report what max_backend would run where for ``model(*example_inputs)``.

    Runs the model in PyTorch only. With ``training=True`` the sum of its
    tensor outputs is also backpropagated, so that backward graphs are
    reported too. ``options`` are max_backend's (``torch_executed_ops``,
    ``min_block_size``). ``print(report)`` shows the tables;
    ``report.as_dict()`` gives the same as data.
    """
    register_families()
    settings = Settings.resolve(options)
    # The strategies it shows are those a compile with ``options`` builds.
    set_product_strategy(settings.product_strategy)
    set_conv_strategy(settings.conv_strategy)
    report = ExplainReport()
    ids = itertools.count()

    def capture(kind: str) -> Callable[..., Any]:
        def compiler(gm: torch.fx.GraphModule, _inputs: Any) -> Any:
            name = f"{kind}_{next(ids)}"
            report.graphs.append(_graph_report(gm, name, settings))
            return make_boxed_func(gm.forward)

        return compiler

    backend = aot_autograd(
        fw_compiler=capture("forward"),
        bw_compiler=capture("backward"),
        inference_compiler=capture("inference"),
        decompositions=decomposition_table(),
        keep_inference_input_mutations=True,
    )
    compiled = torch.compile(model, backend=backend)
    with torch.set_grad_enabled(training):
        out = compiled(*example_inputs, **example_kwargs)
        if training:
            leaves = [
                t
                for t in torch.utils._pytree.tree_leaves(out)
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            if leaves:
                sum(t.float().sum() for t in leaves).backward()

    explained = torch._dynamo.explain(model)(*example_inputs, **example_kwargs)
    for item in explained.break_reasons:
        frames = getattr(item, "user_stack", None) or []
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        report.graph_breaks.append(GraphBreak(str(item.reason), where))
    return report
