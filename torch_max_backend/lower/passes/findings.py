"""What the analysis passes found in one graph: a frozen record, read-only maps.

Planning, the node walk and the output plan read it; nothing adds to it once
``analyzed`` has returned it. The finding of each pass is a type of its own
here, so that the passes and their readers share one vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch


def frozen_map(items: dict | None = None) -> Mapping:
    """A read-only view of ``items`` (a finding's map is never added to)."""
    return MappingProxyType(dict(items or {}))


@dataclass(frozen=True)
class CallerOutputs:
    """The positions in a graph's output tuple, ``start`` up to ``stop`` (None:
    to the end), whose tensors reach the caller as the graph returns them."""

    start: int = 0
    stop: int | None = None

    def __contains__(self, position: int) -> bool:
        return self.start <= position and (self.stop is None or position < self.stop)

    def __str__(self) -> str:
        return f"outputs {self.start}:{'' if self.stop is None else self.stop}"


# An inference graph's: every output.
ALL_OUTPUTS = CallerOutputs()


@dataclass(frozen=True)
class Mutations:
    """The tensor inputs the graph writes (AOTAutograd's ``copy_`` into a
    placeholder), in input order; those written in place as MAX buffers;
    and the ``copy_`` nodes themselves."""

    mutated: tuple[torch.fx.Node, ...] = ()
    buffered: tuple[torch.fx.Node, ...] = ()
    copies: frozenset[torch.fx.Node] = frozenset()


@dataclass(frozen=True)
class FoldedConstants:
    """``folded``: every node computed from literals alone by PyTorch at
    planning, which the walk lowers none of; ``frontier``: those some node
    outside ``folded`` reads, with their values (fed to MAX as inputs)."""

    folded: frozenset[torch.fx.Node] = frozenset()
    frontier: Mapping[torch.fx.Node, torch.Tensor] = field(default_factory=frozen_map)


@dataclass(frozen=True)
class SlotWrite:
    """``source`` written at ``position`` (one element) along ``dim`` of ``target``."""

    target: torch.fx.Node  # the mutated graph input
    dim: int
    position: torch.fx.Node
    source: torch.fx.Node
    write_back: torch.fx.Node  # AOTAutograd's copy_, made redundant


@dataclass(frozen=True)
class AdamUpdate:
    """One parameter's Adam or AdamW update (passes/adam_updates.py): the
    three inputs it writes in place, the gradient, the coefficients of its
    kernel (kernels/mojo/adam_step.mojo's order: decay, w1, beta2, w2, a, b;
    each a number, or a one-element tensor node such as a tensor learning
    rate's decay or the step's bias corrections), AOTAutograd's three
    write-backs and the nodes its kernel replaces."""

    param: torch.fx.Node
    exp_avg: torch.fx.Node
    exp_avg_sq: torch.fx.Node
    grad: torch.fx.Node
    coefficients: tuple[float | torch.fx.Node, ...]
    write_backs: tuple[torch.fx.Node, ...]
    replaced: frozenset[torch.fx.Node]

    @property
    def written(self) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node]:
        return (self.param, self.exp_avg, self.exp_avg_sq)


@dataclass(frozen=True)
class EagerLayout:
    """A returned tensor read through ``as_strided`` from the node whose
    memory it lies in: ``root`` (itself, or what it views), returned as a
    MAX output written in the memory order ``order`` (None: row-major)."""

    root: torch.fx.Node
    order: tuple[int, ...] | None


@dataclass(frozen=True)
class GraphFindings:
    """Every analysis pass's finding for one graph (see passes/__init__.py)."""

    # The outputs that keep eager's strides and aliasing: the build's input.
    caller_outputs: CallerOutputs | None = None
    # The last write-back of each Adam/AdamW update -> the update.
    adam_updates: Mapping[torch.fx.Node, AdamUpdate] = field(default_factory=frozen_map)
    mutations: Mutations = Mutations()
    constants: FoldedConstants = FoldedConstants()
    # index_put/index_copy node -> its one-slot write of a buffered input.
    slot_writes: Mapping[torch.fx.Node, SlotWrite] = field(default_factory=frozen_map)
    # attention node -> (argument position, K or V before transformers' repeat).
    repeated_kv: Mapping[torch.fx.Node, tuple[tuple[int, torch.fx.Node], ...]] = field(
        default_factory=frozen_map
    )
    # output position -> how it keeps eager's layout (positions not here:
    # contiguous memory of its own, an input's memory, or not dense).
    eager_layouts: Mapping[int, EagerLayout] = field(default_factory=frozen_map)

    def summary(self) -> str:
        return (
            f"{len(self.mutations.mutated)} mutated inputs "
            f"({len(self.mutations.buffered)} buffers), "
            f"{len(self.constants.folded)} folded nodes "
            f"({len(self.constants.frontier)} fed), "
            f"{len(self.slot_writes)} slot writes, "
            f"{len(self.adam_updates)} Adam updates, "
            f"{len(self.repeated_kv)} attentions over repeated K/V, "
            f"{len(self.eager_layouts)} outputs in eager's layout"
        )
