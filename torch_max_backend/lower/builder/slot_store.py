"""Storing a KV cache's one new position into the cache's own MAX buffer.

The slot writes pass (passes/slot_writes.py) finds them; the walk stores each
with our ``write_slot`` kernel, its position checked once per graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from max.dtype import DType
from max.graph import BufferValue, DeviceRef, TensorValue, ops

from ...kernels.library import SHIPPED, custom_in_place
from ..checks import in_range
from ..passes import SlotWrite


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
