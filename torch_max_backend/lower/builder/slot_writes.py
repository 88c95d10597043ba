"""Writing one position of a mutated input in place: a KV cache's update.

A static KV cache is updated with ``cache.index_copy_(dim, position, new)``;
functionalized, that is ``index_put(cache, [None, .., position], new)`` (or
``index_copy``) followed by AOTAutograd's ``copy_(cache, result)``. Lowered
as written, every token would copy each layer's whole cache several times
(scatter into a new tensor, store it all back). When the position is a
single element and the cache is read nowhere else, the walk instead stores
``new`` into that slot of the cache's own MAX buffer and reads the buffer
back, so a token writes only its own slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from max.dtype import DType
from max.graph import BufferValue, DeviceRef, TensorValue, ops

from ...kernels.library import SHIPPED, custom_in_place
from ..checks import in_range
from ..kit import is_static, same_sizes, tensor_meta
from .planning import InputPlan, writes_input

aten = torch.ops.aten


@dataclass(frozen=True)
class SlotWrite:
    """``source`` written at ``position`` (one element) along ``dim`` of ``target``."""

    target: torch.fx.Node  # the mutated graph input
    dim: int
    position: torch.fx.Node
    source: torch.fx.Node
    write_back: torch.fx.Node  # AOTAutograd's copy_, made redundant


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


def _slot_write(node: torch.fx.Node, mutated: set[torch.fx.Node]) -> SlotWrite | None:
    if node.op != "call_function" or not node.args:
        return None
    target = node.args[0]
    if target not in mutated:
        return None
    found = _dim_and_position(node)
    if found is None:
        return None
    dim, position = found
    source = node.args[2]
    users = list(target.users)
    write_backs = [u for u in users if writes_input(u, target)]
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
    gm: torch.fx.GraphModule, inputs: InputPlan
) -> dict[torch.fx.Node, SlotWrite]:
    """The one-position writes of ``gm`` that can update a buffer in place,
    keyed by the index_put (or index_copy) node."""
    if inputs.device.type != "cpu":
        # The slot kernel (kernels/mojo/slot_write.mojo) runs on the CPU.
        return {}
    targets = set(inputs.buffered)
    found = {}
    for node in gm.graph.nodes:
        write = _slot_write(node, targets)
        if write is not None:
            found[node] = write
    return found


@dataclass(frozen=True)
class SlotBounds:
    """Where a position's slot lies along a cache dim: computed once per
    position and cache length, for every layer's cache written there."""

    start: TensorValue  # int64, shape [1], in range (0 when refused)
    keep: TensorValue  # bool, shape [1]: false when the call is refused


# Per graph: (position node, cache length) -> its slot's bounds.
SharedBounds = dict[tuple[torch.fx.Node, int], SlotBounds]


def _slot_bounds(
    write: SlotWrite, size: int, position: TensorValue, shared: SharedBounds
) -> SlotBounds:
    key = (write.position, size)
    if key not in shared:
        start = ops.cast(ops.reshape(position, []), DType.int64)
        # A position out of range raises eager's IndexError after the call.
        # Negative positions count from the end, as in torch; one out of
        # range reads 0.
        start, refused = in_range(
            start, size, write.dim, "IndexError", wraps=True, key=key
        )
        if refused is None:
            keep = ops.constant(np.array([True]), DType.bool, DeviceRef.CPU())
        else:
            keep = ops.reshape(ops.logical_not(refused), [1])
        shared[key] = SlotBounds(ops.reshape(start, [1]), keep)
    return shared[key]


def store_slot(
    buffer: BufferValue,
    write: SlotWrite,
    position: TensorValue,
    source: TensorValue,
    shared: SharedBounds,
) -> TensorValue:
    """Store ``source`` into its slot of ``buffer``; the buffer's new contents.
    ``shared`` holds the graph's slot bounds so far: every layer's cache is
    written at the same position, whose bounds are computed (and checked)
    once."""
    bounds = _slot_bounds(write, int(buffer.shape[write.dim]), position, shared)
    # Our kernel reads the position itself and writes nothing for a refused
    # call, as eager raises before it writes. MAX's slice store
    # (ops.buffer_store_slice) took index vectors stacked from scalars and
    # read on the host, and needed a condition around it to leave the cache
    # as it was (what was measured: kernels/mojo/slot_write.mojo).
    custom_in_place(
        SHIPPED,
        "torch_max_backend_write_slot",
        [buffer, source, bounds.start, bounds.keep],
        buffer.device,
        parameters={"dim": write.dim},
    )
    # Read after the store: MAX orders buffer operations in graph order.
    return ops.buffer_load(buffer)
