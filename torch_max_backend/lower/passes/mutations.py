"""The inputs a graph writes, and which of them MAX writes in place.

AOTAutograd ends a graph that mutates an input with ``copy_(input, new)``.
Such an input becomes a MAX buffer the graph stores into, up to
``MAX_BUFFERS`` of them; past that the others are graph outputs the runtime
copies back into their tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from .findings import GraphFindings, Mutations

# At most this many mutated inputs of one graph become MAX buffers written in
# place; the others are graph outputs the runtime copies into their tensors.
# MAX's compile time climbs steeply past a few dozen buffers in one graph
# (max 26.7, AMD EPYC Zen 5: an update of 24 buffers compiles in 16 s, 30 in
# 22 s, 34 in 95 s, 41 in over 400 s; the same 41 updates as outputs in 20 s),
# and an optimizer step mutates every parameter and its state.
MAX_BUFFERS = 24


def writes_input(node: torch.fx.Node, target: Any) -> bool:
    """Whether ``node`` is AOTAutograd's copy of a new value into the tensor input ``target``."""
    return (
        node.op == "call_function"
        and node.target is torch.ops.aten.copy_.default
        and node.args[0] is target
        and isinstance(target, torch.fx.Node)
        and target.op == "placeholder"
        and isinstance(target.meta.get("val"), torch.Tensor)
    )


def _writes_one_slot(node: torch.fx.Node) -> bool:
    """Whether an index_put or index_copy writes into ``node`` (a KV cache's
    update, which slot_writes may turn into a one-slot store)."""
    return any(
        user.target
        in (torch.ops.aten.index_put.default, torch.ops.aten.index_copy.default)
        and user.args[0] is node
        for user in node.users
    )


def _buffered(
    mutated: list[torch.fx.Node], in_kernels: set[torch.fx.Node]
) -> list[torch.fx.Node]:
    """The mutated inputs that become MAX buffers: those our in-place
    optimizer kernels write (outside the budget: the cliff is MAX's buffer stores,
    and 186 buffers updated by that kernel compiled in 31 s), then all the
    others up to MAX_BUFFERS; beyond it, KV caches first (a one-slot store
    saves copying the cache)."""
    stored = [n for n in mutated if n not in in_kernels]
    if len(stored) > MAX_BUFFERS:
        stored = [n for n in stored if _writes_one_slot(n)][:MAX_BUFFERS]
    return [n for n in mutated if n in in_kernels or n in stored]


def find_mutations(gm: torch.fx.GraphModule, found: GraphFindings) -> Mutations:
    """The pass: the mutated inputs, those buffered, and their ``copy_`` nodes."""
    copies = frozenset(
        node
        for node in gm.graph.nodes
        if writes_input(node, node.args[0] if node.args else None)
    )
    mutated = [
        node
        for node in gm.graph.nodes
        if node.op == "placeholder"
        and any(user in copies and user.args[0] is node for user in node.users)
    ]
    in_kernels = {n for u in found.optimizer_updates.values() for n in u.inputs_written}
    return Mutations(tuple(mutated), tuple(_buffered(mutated, in_kernels)), copies)
