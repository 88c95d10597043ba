"""Higher-order ops: graphs that call graphs of their own.

``torch.cond``, a data-dependent branch, is lowered to MAX's ``ops.cond``.
Dynamo and AOTAutograd keep the branch as one ``higher_order.cond`` node
whose true and false functions are graphs of their own (``get_attr``
submodules) taking the same operands. Each branch graph is lowered by the
node walk's own calls into a nested block of the MAX graph, so that only the
branch the predicate picks runs. MAX's cond takes its predicate on the CPU,
so CPU graphs only; a branch whose ops would check their inputs at run time
(an index range: lower/checks.py) runs in PyTorch, since a flag computed
inside a branch cannot leave it.

``invoke_subgraph`` (a region marked ``torch.compiler.nested_compile_region``,
PyTorch's regional compilation) is inlined: its graph's nodes lowered in
place at each call, so a model of repeated marked layers becomes one MAX
graph as the unmarked model does (MAX compiles a graph whole; it has no
call of a graph compiled once).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from max.graph import DeviceRef, TensorType, TensorValue, ops

from ...dtypes import to_max_dtype
from ..checks import Checks, collecting
from ..kit import device_of
from ..registry import draws_random
from ..shapes import max_dim

COND = torch.ops.higher_order.cond
INVOKE_SUBGRAPH = torch.ops.higher_order.invoke_subgraph
WHILE_LOOP = torch.ops.higher_order.while_loop
# Lowered in flex_attention.py, through the same inner-graph walk.
FLEX_ATTENTION = torch.ops.higher_order.flex_attention
HIGHER_ORDER = (COND, INVOKE_SUBGRAPH, WHILE_LOOP, FLEX_ATTENTION)

# What each covers, for docs/ops.md (``torch-max-backend ops``).
COVERAGE = {
    "cond": "MAX's cond, both branches in the graph's MAX graph, only the "
    "picked one run; CPU graphs; a branch that checks indices at run time, "
    "draws random numbers, nests a graph or returns sizes no operand has "
    "runs in PyTorch",
    "while_loop": "MAX's while_loop over the carried tensors, the condition "
    "and body graphs lowered into its blocks; CPU graphs; a condition or body "
    "that checks indices at run time, draws random numbers or nests a graph, "
    "or carried values whose sizes change, runs in PyTorch",
    "invoke_subgraph": "a nested_compile_region inlined at each call, "
    "inference and training; a region that draws random numbers or nests a "
    "graph runs in PyTorch",
    "flex_attention": "forward, static sizes: eager's dense math traced with "
    "the node's sizes (score_mod and mask_mod elementwise over the score "
    "matrix, GQA, logsumexp) and lowered in place (builder/flex_attention.py); "
    "the block mask's block lists are not read, as in eager on a CPU",
}

# A node's lowering: (node, its values so far) -> its MAX value(s).
CallNode = Callable[[torch.fx.Node, dict[torch.fx.Node, Any]], Any]


def _subgraph(
    gm: torch.fx.GraphModule, attribute: torch.fx.Node
) -> torch.fx.GraphModule:
    """The graph a ``get_attr`` node of ``gm`` names."""
    return operator.attrgetter(attribute.target)(gm)


def why_not_cond(
    node: torch.fx.Node,
    gm: torch.fx.GraphModule,
    why_unsupported: Callable[[torch.fx.Node], object],
    lowering_of: Callable[[torch.fx.Node], object],
) -> str | None:
    """Why this ``cond`` node cannot run on MAX, or None."""
    pred = (
        node.args[0].meta.get("val")
        if isinstance(node.args[0], torch.fx.Node)
        else None
    )
    if not isinstance(pred, torch.Tensor) or pred.numel() != 1:
        return "a predicate that is not a one-element tensor"
    if device_of(pred).type != "cpu":
        return "a predicate off the CPU (MAX's cond takes it on the CPU)"
    results = node.meta.get("val")
    if not all(isinstance(r, torch.Tensor) for r in results or ()):
        return "a branch returning something other than tensors"
    known = {
        size.node.expr
        for operand in node.args[3]
        for size in getattr(operand.meta.get("val"), "shape", ())
        if isinstance(size, torch.SymInt)
    }
    for result in results:
        for size in result.shape:
            if isinstance(size, torch.SymInt) and size.node.expr not in known:
                # Branches of different shapes: a size known only at run time.
                return f"a result of size {size} that no operand has"
    for branch in (_subgraph(gm, node.args[1]), _subgraph(gm, node.args[2])):
        reason = _why_not_inner(branch, why_unsupported, lowering_of)
        if reason is not None:
            return f"a branch {reason}"
    return None


def _why_not_inner(
    inner_gm: torch.fx.GraphModule,
    why_unsupported: Callable[[torch.fx.Node], object],
    lowering_of: Callable[[torch.fx.Node], object],
) -> str | None:
    """Why a graph a higher-order op calls cannot be lowered in place."""
    for inner in inner_gm.graph.nodes:
        if inner.op == "get_attr" or inner.target in HIGHER_ORDER:
            return "holds a graph of its own (nested)"
        if why_unsupported(inner) is not None:
            return f"calls {inner.target}, which MAX cannot run"
        fn = lowering_of(inner)
        if fn is not None and draws_random(fn):
            # The graph's seed input is planned from its own nodes only.
            return "draws random numbers"
        if inner.op == "placeholder" and not isinstance(
            inner.meta.get("val"), torch.Tensor
        ):
            return "takes an input that is not a tensor"
    return None


def why_not_invoke_subgraph(
    node: torch.fx.Node,
    gm: torch.fx.GraphModule,
    why_unsupported: Callable[[torch.fx.Node], object],
    lowering_of: Callable[[torch.fx.Node], object],
) -> str | None:
    """Why this ``invoke_subgraph`` node cannot be inlined on MAX, or None."""
    subgraph = node.args[0]
    if not isinstance(subgraph, torch.fx.Node) or subgraph.op != "get_attr":
        return "a region that is not a graph of this one"
    reason = _why_not_inner(_subgraph(gm, subgraph), why_unsupported, lowering_of)
    return None if reason is None else f"the region {reason}"


def _build_inner(
    gm: torch.fx.GraphModule, operands: list[Any], call: CallNode
) -> list[Any]:
    """``gm``'s outputs built on ``operands`` into the current block."""
    values: dict[torch.fx.Node, Any] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values.update(zip(placeholders, operands, strict=True))
    results: list[Any] = []
    for inner in gm.graph.nodes:
        if inner.op == "call_function":
            values[inner] = call(inner, values)
        elif inner.op == "output":
            returned = inner.args[0]
            returned = returned if isinstance(returned, (list, tuple)) else [returned]
            results = [
                values[r] if isinstance(r, torch.fx.Node) else r for r in returned
            ]
    return results


def _build_checked(
    gm: torch.fx.GraphModule, operands: list[Any], call: CallNode, what: str
) -> list[Any]:
    """``_build_inner`` into a nested block, refused where it records a check
    (a flag computed inside the block cannot leave it)."""
    checks = Checks()
    with collecting(checks):
        results = _build_inner(gm, operands, call)
    if checks.checks:
        raise ValueError(
            f"a {what} whose ops check their inputs at run time "
            f"({checks.checks[0].message}) runs in PyTorch"
        )
    return results


def inline_subgraph(
    node: torch.fx.Node,
    gm: torch.fx.GraphModule,
    values: dict[torch.fx.Node, Any],
    call: CallNode,
) -> list[Any]:
    """``node`` (``invoke_subgraph(region, name, *operands)``) lowered in place."""
    operands = [values[o] for o in node.args[2:]]
    return _build_inner(_subgraph(gm, node.args[0]), operands, call)


def lower_cond(
    node: torch.fx.Node,
    gm: torch.fx.GraphModule,
    values: dict[torch.fx.Node, Any],
    call: CallNode,
    device: DeviceRef,
) -> list[TensorValue]:
    """``node`` (``cond(pred, true_fn, false_fn, operands)``) as MAX's cond."""
    pred = values[node.args[0]]
    operands = [values[o] for o in node.args[3]]
    true_gm, false_gm = _subgraph(gm, node.args[1]), _subgraph(gm, node.args[2])
    out_types = [
        TensorType(
            to_max_dtype(meta.dtype),
            [max_dim(s, f"output of {node.name}") for s in meta.shape],
            device,
        )
        for meta in node.meta["val"]
    ]
    return ops.cond(
        ops.reshape(pred, []),
        out_types,
        lambda: _build_checked(true_gm, operands, call, "branch"),
        lambda: _build_checked(false_gm, operands, call, "branch"),
    )


def why_not_while_loop(
    node: torch.fx.Node,
    gm: torch.fx.GraphModule,
    why_unsupported: Callable[[torch.fx.Node], object],
    lowering_of: Callable[[torch.fx.Node], object],
) -> str | None:
    """Why this ``while_loop`` node cannot run on MAX, or None."""
    carried = [
        c.meta.get("val") if isinstance(c, torch.fx.Node) else c for c in node.args[2]
    ]
    if not carried or not all(isinstance(c, torch.Tensor) for c in carried):
        return "carried values that are not tensors"
    if any(device_of(c).type != "cpu" for c in carried):
        return "carried values off the CPU (MAX's loop predicate lives there)"
    results = node.meta.get("val") or ()
    same = len(results) == len(carried) and all(
        isinstance(r, torch.Tensor)
        and r.dtype == c.dtype
        and len(r.shape) == len(c.shape)
        and all(str(a) == str(b) for a, b in zip(r.shape, c.shape, strict=True))
        for r, c in zip(results, carried, strict=False)
    )
    if not same:
        return "carried values whose sizes or dtypes change in the loop"
    for attribute in node.args[:2]:
        inner = _subgraph(gm, attribute)
        reason = _why_not_inner(inner, why_unsupported, lowering_of)
        if reason is not None:
            return f"its condition or body {reason}"
    return None


def lower_while_loop(
    node: torch.fx.Node,
    gm: torch.fx.GraphModule,
    values: dict[torch.fx.Node, Any],
    call: CallNode,
) -> list[TensorValue]:
    """``node`` (``while_loop(cond, body, carried, additional)``) as MAX's
    while_loop: the additional inputs are read from the enclosing graph."""
    cond_gm, body_gm = _subgraph(gm, node.args[0]), _subgraph(gm, node.args[1])
    carried = [values[c] for c in node.args[2]]
    extra = [values[a] for a in node.args[3]]

    def predicate(*current: TensorValue) -> TensorValue:
        operands = [*current, *extra]
        (flag,) = _build_checked(cond_gm, operands, call, "condition")
        return ops.reshape(flag, [])

    def body(*current: TensorValue) -> list[TensorValue]:
        return _build_checked(body_gm, [*current, *extra], call, "body")

    return ops.while_loop(carried, predicate, body)
