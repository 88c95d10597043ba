"""What a lowering may ask about the node being built: its device and output meta.

The graph builder enters one ``LoweringContext`` per node; lowerings read it
through ``current()`` instead of taking an extra argument, so that their
signatures stay those of the ATen schema.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np
import torch
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorValue, ops

from .layout import ChannelsLastTwins


@dataclass(frozen=True)
class LoweringContext:
    node: torch.fx.Node
    device: DeviceRef
    # The channels-last twins of the graph being built (see layout.py).
    twins: ChannelsLastTwins
    # For ops over tensor lists (_foreach_*): the list element being built.
    element: int | None = None
    # Set while a half-precision node's math is built in float32 (opmath.py):
    # the dtype its lowering computes in, reported as its output dtype.
    computed_in: torch.dtype | None = None
    # Values PyTorch computed at planning (passes/folding.py), by FX node:
    # the graph reads them as constant inputs.
    folded: Mapping[torch.fx.Node, torch.Tensor] = field(default_factory=dict)
    # Values derived from another once per graph (``derived_once``).
    derived: dict[tuple, tuple] = field(default_factory=dict)
    # Products reading a packed weight -> that input (packed_products.py).
    packed: Mapping[torch.fx.Node, TensorValue] = field(default_factory=dict)

    def known_bounds(self, arg: object) -> tuple[int, int] | None:
        """The least and greatest element of an integer tensor argument whose
        values were computed at planning (an index range from ``arange``,
        interpolation's source positions), or None: a graph input, a value
        computed in the graph, an empty tensor. A build that relies on them
        is a graph of its own, since it leaves out what other values need."""
        value = self.folded.get(arg) if isinstance(arg, torch.fx.Node) else None
        if value is None or value.numel() == 0 or value.is_floating_point():
            return None
        if value.dtype == torch.bool:
            return None
        low, high = torch.aminmax(value)
        return int(low), int(high)

    @property
    def out_meta(self) -> object:
        """The FakeTensor (or list of them, or SymInt) this node produces."""
        meta = self.node.meta.get("val")
        if self.element is not None and isinstance(meta, (list, tuple)):
            return meta[self.element]
        return meta

    @property
    def out_dtype(self) -> torch.dtype:
        if self.computed_in is not None:
            return self.computed_in
        meta = self.out_meta
        if isinstance(meta, (list, tuple)):
            meta = meta[0]
        if not isinstance(meta, torch.Tensor):
            raise TypeError(f"node {self.node.name} does not produce a tensor")
        return meta.dtype


_CURRENT: ContextVar[LoweringContext | None] = ContextVar("max_lowering", default=None)


def current() -> LoweringContext:
    ctx = _CURRENT.get()
    if ctx is None:
        raise RuntimeError("lowerings run only inside the graph builder")
    return ctx


@contextlib.contextmanager
def lowering_node(
    node: torch.fx.Node,
    device: DeviceRef,
    twins: ChannelsLastTwins,
    folded: Mapping[torch.fx.Node, torch.Tensor] | None = None,
    derived: dict[tuple, tuple] | None = None,
    packed: Mapping[torch.fx.Node, TensorValue] | None = None,
) -> Iterator[None]:
    context = LoweringContext(
        node,
        device,
        twins,
        folded=folded or {},
        derived={} if derived is None else derived,
        packed=packed or {},
    )
    token = _CURRENT.set(context)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def derived_once(
    name: str, source: TensorValue, make: Callable[[], TensorValue]
) -> TensorValue:
    """``make()``, a value computed from ``source`` alone, built once per
    graph (and per branch block) and reused by every node that asks for it:
    MAX does not merge repeated subexpressions, so each copy would be
    kernels of its own (a mask's rows check in every attention layer)."""
    block = Graph.current._current_block
    key = (name, id(source), id(block))
    found = current().derived.get(key)
    if found is not None and found[0] is source and found[1] is block:
        return found[2]
    value = make()
    # source and block are kept alive with the value, so their ids stay theirs.
    current().derived[key] = (source, block, value)
    return value


@contextlib.contextmanager
def list_element(index: int) -> Iterator[None]:
    """Build element ``index`` of a list-valued node, with that element's meta."""
    ctx = current()
    token = _CURRENT.set(dataclasses.replace(ctx, element=index))
    try:
        yield
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def computing_in(dtype: torch.dtype) -> Iterator[None]:
    """Build the current node's math in ``dtype``: ``out_dtype`` says it."""
    token = _CURRENT.set(dataclasses.replace(current(), computed_in=dtype))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def known_arg_bounds(
    position: int, name: str, item: int | None = None
) -> tuple[int, int] | None:
    """The known bounds (``LoweringContext.known_bounds``) of the current
    node's argument ``name`` at ``position``, or of item ``item`` of it."""
    node = current().node
    arg = node.args[position] if len(node.args) > position else node.kwargs.get(name)
    if item is not None:
        arg = arg[item] if isinstance(arg, (list, tuple)) and item < len(arg) else None
    return current().known_bounds(arg)


def unread_output() -> TensorValue:
    """A stand-in for an output of the current node that no node reads (the
    builder drops it): an empty float32 constant, where computing the output
    would cost MAX kernels. (Not cast to the output's dtype: a cast of a
    constant is an op MAX would evaluate at compile time.)"""
    return ops.constant(
        np.zeros((0,), np.float32), DType.float32, device=current().device
    )
