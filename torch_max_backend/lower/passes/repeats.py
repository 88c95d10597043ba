"""Repeated subexpressions of an ATen graph, computed once.

Model code often recomputes a value layer by layer: transformers' language
models rebuild the attention mask's boolean form and its position ranges in
every layer, so a 12-layer GPT-2 decode step asks for the same mask twelve
times. AOTAutograd merges such repeats in training graphs (its partitioner
runs a common-subexpression pass) but not in inference graphs, and MAX does
not merge them either: each copy became kernels of its own, compiled and run
at every call. Merging them in the FX graph before it is lowered removes
those kernels.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.fx.node import map_arg
from torch.multiprocessing.reductions import StorageWeakRef

from .graph_copy import graph_copy

_log = logging.getLogger("torch_max_backend.lower.repeats")


def _writes(node: torch.fx.Node) -> bool:
    """Whether ``node`` writes a tensor in place."""
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable


def _draws(node: torch.fx.Node) -> bool:
    """Whether ``node`` draws random numbers (or, like ``empty``, returns
    whatever memory holds): two such calls are two values, never one."""
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and (
        torch.Tag.nondeterministic_seeded in target.tags
        or target is torch.ops.aten.empty.memory_format
    )


def _storage(node: torch.fx.Node) -> StorageWeakRef | None:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return StorageWeakRef(value.untyped_storage())
    except NotImplementedError:
        return None


def _returned_memory(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Nodes whose value lies in the memory of a returned tensor: merged, two
    outputs that are separate tensors in eager would share memory."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    returned = {s for n in output.all_input_nodes if (s := _storage(n)) is not None}
    return {n for n in gm.graph.nodes if _storage(n) in returned}


def without_repeats(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each repeated pure subexpression computed once; ``gm``
    itself when nothing repeats (so its MAX graph stays the same)."""
    kept = _returned_memory(gm)
    replaced: dict[torch.fx.Node, torch.fx.Node] = {}
    seen: dict[Any, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node in kept or _draws(node):
            continue
        if _writes(node):
            # A write starts a new region: a value read after it may differ
            # from the same expression read before it.
            seen.clear()
            continue
        args = map_arg(node.args, lambda a: replaced.get(a, a))
        kwargs = map_arg(node.kwargs, lambda a: replaced.get(a, a))
        try:
            key = (node.target, _hashable(args), _hashable(kwargs))
            first = seen.setdefault(key, node)
        except TypeError:  # an argument that cannot be compared by value
            continue
        if first is not node:
            replaced[node] = first
    if not replaced:
        return gm
    graph, copies = graph_copy(gm)
    for node, first in replaced.items():
        copies[node].replace_all_uses_with(copies[first])
    for node in reversed(list(replaced)):
        graph.erase_node(copies[node])
    _log.debug("merged %d repeated nodes", len(replaced))
    return torch.fx.GraphModule(gm, graph)


def _hashable(value: Any) -> Any:
    """A key equal for equal arguments; types kept apart (1 and 1.0 and True
    are different arguments to an ATen op), and 0.0 from -0.0."""
    if isinstance(value, float):
        return (float, repr(value))
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple(sorted((k, _hashable(v)) for k, v in value.items())))
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return (type(value), str(value.node))
    hash(value)
    return (type(value), value)
