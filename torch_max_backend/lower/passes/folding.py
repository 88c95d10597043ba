"""Constant subexpressions, computed by PyTorch once and fed to MAX as inputs.

A graph often computes tensors from literals alone: index ranges, causal masks
and position tables built with ``arange`` from static sizes. MAX evaluates such
subexpressions at compile time (its ConstantFold pass), and to do so it
JIT-compiles their kernels in a compile session of its own: about 30 s on top
of the graph's own kernels on a 2-core AMD EPYC (max 26.7), whenever a graph
has any. PyTorch computes the same values in microseconds when the graph is
planned, so the planner evaluates them here and feeds the values the rest of
the graph reads (the frontier) as constant inputs, like graph attributes: the
compiled graph then has nothing to fold, and stays the same for other values.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.fx.node import map_arg

from .findings import FoldedConstants, GraphFindings, frozen_map

_log = logging.getLogger("torch_max_backend.lower.folding")

# A frontier value larger than this stays in the graph: it would be held in
# memory for the compiled graph's lifetime and read at every call.
MAX_FOLDED_BYTES = 64 * 1024 * 1024

# Ops that only fill a tensor with one value: alone, MAX keeps them as a splat
# it fuses into their readers, with nothing to fold, so they are not lifted.
_FILLS = frozenset(
    {
        torch.ops.aten.full.default,
        torch.ops.aten.zeros.default,
        torch.ops.aten.ones.default,
        torch.ops.aten.scalar_tensor.default,
        torch.ops.aten.empty.memory_format,
    }
)

# What an ATen op's non-tensor arguments hold.
_LITERALS = (
    int,
    float,
    bool,
    str,
    type(None),
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)


def _static_meta(node: torch.fx.Node) -> torch.Tensor | None:
    """The node's fake tensor when it is one tensor of static size."""
    meta = node.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        return None
    if not all(isinstance(s, int) for s in meta.shape):
        return None
    return meta


def _may_fold(node: torch.fx.Node) -> bool:
    """Whether the op is a pure function of its arguments: an ATen op that
    neither draws random numbers nor writes any argument."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return not target._schema.is_mutable


def _literal_only(value: Any, known: dict[torch.fx.Node, torch.Tensor]) -> bool:
    """Whether an argument holds only literals and already computed nodes."""
    if isinstance(value, torch.fx.Node):
        return value in known
    if isinstance(value, (list, tuple)):
        return all(_literal_only(v, known) for v in value)
    return isinstance(value, _LITERALS)


def _evaluate(
    node: torch.fx.Node, meta: torch.Tensor, known: dict[torch.fx.Node, torch.Tensor]
) -> torch.Tensor | None:
    """The node's value computed by PyTorch, or None when it cannot be."""
    args = map_arg(node.args, known.__getitem__)
    kwargs = map_arg(node.kwargs, known.__getitem__)
    try:
        value = node.target(*args, **kwargs)
    except Exception as e:  # the node then stays in the graph
        _log.debug("torch-max-backend: %s not folded: %s", node.name, e)
        return None
    if (
        not isinstance(value, torch.Tensor)
        or value.shape != meta.shape
        or value.dtype != meta.dtype
    ):
        return None
    return value


def find_constants(gm: torch.fx.GraphModule, found: GraphFindings) -> FoldedConstants:
    """The pass: the literal-only nodes of ``gm``, computed here, and the
    values to feed for those that nodes outside them read."""
    known: dict[torch.fx.Node, torch.Tensor] = {}
    for node in gm.graph.nodes:
        meta = _static_meta(node)
        if (
            meta is None
            or not _may_fold(node)
            or meta.numel() * meta.element_size() > MAX_FOLDED_BYTES
            or not _literal_only(node.args, known)
            or not _literal_only(list(node.kwargs.values()), known)
        ):
            continue
        value = _evaluate(node, meta, known)
        if value is not None:
            known[node] = value
    folded = _drop_lone_fills(known)
    frontier = {
        node: known[node].detach().contiguous()
        for node in folded
        if any(user not in folded for user in node.users)
    }
    if frontier:
        _log.debug(
            "torch-max-backend: %d constant nodes computed at planning, "
            "%d fed as inputs",
            len(folded),
            len(frontier),
        )
    return FoldedConstants(frozenset(folded), frozen_map(frontier))


def _drop_lone_fills(known: dict[torch.fx.Node, torch.Tensor]) -> set[torch.fx.Node]:
    """The nodes worth folding: all but a fill read by nothing folded,
    which MAX keeps as a splat it fuses into its readers.

    A value the graph returns is folded too: MAX then returns the constant
    input's own memory, which the runtime copies for the caller at every
    call (runtime/compiled_graph.py), so no caller can write into it.
    One pass is enough: a fill reads no node, so dropping one never leaves
    another fill with fewer folded readers.
    """
    return {
        node
        for node in known
        if node.target not in _FILLS or any(user in known for user in node.users)
    }
