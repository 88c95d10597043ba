"""Where a graph's index ranges start: a runtime zero, so that MAX cannot fold them.

A range over a static size (``shapes.positions``) has only constants for
operands, so MAX evaluates it, and all the index arithmetic computed from it
alone (slice_scatter's and gather's index tensors, a causal comparison), at
compile time: its ConstantFold pass JIT-compiles kernels of their own, 19-34 s
of a 2-layer llama training step's compile on a 2-core AMD EPYC (max 26.7),
for tensors that cost microseconds at run time. A range that starts at a graph input holding 0
is computed at every call instead. Whether a graph needs that input is known
only once its lowerings have run: the first build records the wish and the
builder builds the graph again with the input (builder/__init__.py), on the
CPU only: MAX's ranges take their scalars on the host, and an exported
package places every input on its one device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from max.dtype import DType
from max.graph import DeviceRef, TensorValue, ops


class IndexOrigin:
    """The graph's origin input, if it has one, and whether a lowering asked."""

    def __init__(self, value: TensorValue | None) -> None:
        self.value = value
        self.wanted = False

    def start(self) -> TensorValue | None:
        """The runtime zero (an int64 scalar on the CPU), or None for a graph
        built without one; the wish is then recorded."""
        if self.value is None:
            self.wanted = True
        return self.value


_CURRENT: ContextVar[IndexOrigin | None] = ContextVar("max_index_origin", default=None)


@contextlib.contextmanager
def building_with(origin: IndexOrigin) -> Iterator[None]:
    """Ranges built inside start at ``origin``'s input."""
    token = _CURRENT.set(origin)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def origin_start() -> TensorValue | None:
    """The runtime zero of the graph being built, or None (a constant 0 then)."""
    origin = _CURRENT.get()
    return None if origin is None else origin.start()


def runtime_int(value: int, device: DeviceRef) -> TensorValue:
    """``value`` as an int64 scalar that MAX reads at run time (the origin
    plus ``value``), where the graph has an origin; a constant otherwise."""
    start = origin_start()
    if start is None:
        return ops.constant(value, DType.int64, device=device)
    return ops.add(start, ops.constant(value, DType.int64, DeviceRef.CPU()))
