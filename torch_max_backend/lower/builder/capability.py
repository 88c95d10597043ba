"""The capability check: can every node of a graph be lowered, and if not, why.

Read before anything is built: by the backend's strict mode (one error listing
every unsupported op), by the partitioner, and by ``explain()``; and whether a
graph needs MAX at all (``computes_nothing``: views alone run in PyTorch).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch._ops import OpOverload

from ...dtypes import supported_dtype
from ...errors import UnsupportedOp, UnsupportedOpsError, op_schema, user_frame
from ..registry import (
    MAPPING_TORCH_ATEN_TO_MAX,
    LoweringFn,
    strategy_for,
    unsupported_reason,
)
from .flex_attention import why_not_flex_attention
from .higher_order import (
    COND,
    FLEX_ATTENTION,
    HIGHER_ORDER,
    INVOKE_SUBGRAPH,
    WHILE_LOOP,
    why_not_cond,
    why_not_invoke_subgraph,
    why_not_while_loop,
)
from .sym_numbers import SYM_TARGETS


def lowering_of(node: torch.fx.Node) -> LoweringFn | None:
    """The registered lowering of an op node, or None."""
    if isinstance(node.target, OpOverload):
        return MAPPING_TORCH_ATEN_TO_MAX.get(node.target)
    return None


def is_size_arithmetic(node: torch.fx.Node) -> bool:
    """Python arithmetic on sizes, or indexing into an op's tuple result."""
    return node.op == "call_function" and node.target in SYM_TARGETS


def computes_nothing(gm: torch.fx.GraphModule) -> bool:
    """Whether every op of ``gm`` is a view (``detach``, ``view``, ``t``...),
    tuple indexing or size arithmetic: nothing to compute, nothing written."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem or is_size_arithmetic(node):
            continue
        target = node.target
        if (
            not isinstance(target, torch._ops.OpOverload)
            or not target.is_view
            or target._schema.is_mutable
        ):
            return False
    return True


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
    if node.op != "call_function" or node.target in SYM_TARGETS:
        return None
    if node.target in HIGHER_ORDER:
        gm = node.graph.owning_module
        why_not = {
            FLEX_ATTENTION: why_not_flex_attention,
            COND: why_not_cond,
            INVOKE_SUBGRAPH: why_not_invoke_subgraph,
            WHILE_LOOP: why_not_while_loop,
        }[node.target]
        reason = why_not(node, gm, why_unsupported, lowering_of)
        name = f"higher_order.{node.target.name()}"
        return None if reason is None else (name, name, reason)
    fn = lowering_of(node)
    if fn is not None:
        reason = unsupported_reason(fn, node)
        if reason is None:
            return None
    else:
        reason = ""
    return str(node.target), op_schema(node.target), reason


def strategy_of(node: torch.fx.Node) -> str | None:
    """Which of its op's ranked strategies builds ``node``; None for an op
    with one way of lowering (or none)."""
    fn = lowering_of(node)
    return None if fn is None else strategy_for(fn, node)


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
    """Raise ``UnsupportedOpsError`` listing every op of ``graphs`` that cannot be lowered."""
    unsupported = find_unsupported(graphs)
    if unsupported:
        raise UnsupportedOpsError(unsupported)
