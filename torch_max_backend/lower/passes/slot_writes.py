"""Finding the writes of one position of a mutated input: a KV cache's update.

A static KV cache is updated with ``cache.index_copy_(dim, position, new)``;
functionalized, that is ``index_put(cache, [None, .., position], new)`` (or
``index_copy``) followed by AOTAutograd's ``copy_(cache, result)``. Lowered
as written, every token would copy each layer's whole cache several times
(scatter into a new tensor, store it all back). When the position is a
single element and the cache is read nowhere else, the walk instead stores
``new`` into that slot of the cache's own MAX buffer and reads the buffer
back, so a token writes only its own slot (builder/slot_store.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..kit import is_static, same_sizes, tensor_meta
from .findings import GraphFindings, Mutations, SlotWrite, frozen_map

aten = torch.ops.aten


def _one_position(node: object) -> bool:
    meta = tensor_meta(node)
    return (
        meta is not None
        and meta.dim() <= 1
        and not meta.dtype.is_floating_point
        and meta.dtype != torch.bool
        and is_static(meta.shape)
        and meta.numel() == 1
    )


def _dim_and_position(node: torch.fx.Node) -> tuple[int, torch.fx.Node] | None:
    """The dim and the position node of a one-position write, else None."""
    if node.target is aten.index_copy.default and len(node.args) == 4:
        _, dim, position, _ = node.args
        if isinstance(dim, int) and _one_position(position):
            return dim, position  # type: ignore[return-value]
        return None
    if node.target is aten.index_put.default:
        indices = node.args[1]
        accumulate = node.args[3] if len(node.args) > 3 else False
        accumulate = node.kwargs.get("accumulate", accumulate)
        if accumulate or not isinstance(indices, (list, tuple)) or not indices:
            return None
        *leading, position = indices
        if all(i is None for i in leading) and _one_position(position):
            return len(leading), position
    return None


def _slot_write(
    node: torch.fx.Node, buffered: set[torch.fx.Node], mutations: Mutations
) -> SlotWrite | None:
    if node.op != "call_function" or not node.args:
        return None
    target = node.args[0]
    if target not in buffered:
        return None
    found = _dim_and_position(node)
    if found is None:
        return None
    dim, position = found
    source = node.args[2]
    users = list(target.users)
    write_backs = [u for u in users if u in mutations.copies and u.args[0] is target]
    if len(users) != 2 or len(write_backs) != 1 or node not in users:
        return None  # the cache's old value is read elsewhere: stay functional
    write_back = write_backs[0]
    if write_back.args[1] is not node:
        return None
    cache, new = tensor_meta(target), tensor_meta(source)
    if cache is None or new is None:
        return None
    if not -cache.dim() <= dim < cache.dim() or not isinstance(cache.shape[dim], int):
        return None  # a slot in a dynamic dim could not be kept in bounds
    dim %= cache.dim()
    slot_shape = list(cache.shape)
    slot_shape[dim] = 1
    if new.dtype != cache.dtype or not same_sizes(new.shape, slot_shape):
        return None  # broadcasting or casting values: the functional path has it
    return SlotWrite(target, dim, position, source, write_back)


def find_slot_writes(
    gm: torch.fx.GraphModule, found: GraphFindings
) -> Mapping[torch.fx.Node, SlotWrite]:
    """The pass: the one-position writes of ``gm`` that can update an input
    written in place (``found.mutations.buffered``), keyed by the index_put
    (or index_copy) node."""
    targets = set(found.mutations.buffered)
    writes = {}
    for node in gm.graph.nodes:
        write = _slot_write(node, targets, found.mutations)
        if write is not None:
            writes[node] = write
    return frozen_map(writes)
