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
# A backward's: none, each output then laid out as a forward's saved tensor
# (eager_layouts.py).
NO_OUTPUTS = CallerOutputs(0, 0)


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


# A coefficient of an optimizer kernel: a number (read from the update's
# numbers input, so that one compiled graph serves every value: a learning
# rate a scheduler changes), or a one-element tensor node (a tensor learning
# rate's decay, the step's bias corrections).
Coefficient = float | torch.fx.Node


@dataclass(frozen=True)
class StepCount:
    """Adam's step count, incremented in place by our ``adam_count`` kernel,
    which turns it into the update's bias corrections (passes/adam_counts.py):
    the count's input (one float32 element) and whether the step size is
    ``lr / (1 - beta1^t)`` (a tensor learning rate) rather than
    ``(1 / (1 - beta1^t)) * lr``."""

    step: torch.fx.Node
    lr_divides: bool


@dataclass(frozen=True)
class OptimizerUpdate:
    """One parameter's optimizer update run as one in-place kernel of ours
    (passes/optimizer_updates.py): the kernel's name, the inputs it writes
    in place in its order (the parameter first, then its state, then the
    gradient where it writes that too), the gradient it reads, its
    coefficients (in the kernel's order), AOTAutograd's write-backs and the
    nodes the kernel replaces. With ``count``, the
    coefficients end with those of the step count's kernel, which computes
    the kernel's last ones (Adam's bias corrections)."""

    kernel: str
    written: tuple[torch.fx.Node, ...]
    grad: torch.fx.Node
    coefficients: tuple[Coefficient, ...]
    write_backs: tuple[torch.fx.Node, ...]
    replaced: frozenset[torch.fx.Node]
    count: StepCount | None = None
    # The kernel's compile-time parameters (adam_step's coupled_decay, maximize).
    kernel_parameters: tuple[tuple[str, bool], ...] = ()

    @property
    def grad_written(self) -> bool:
        """Whether the kernel also writes the gradient (in ``written``)."""
        return self.grad in self.written

    @property
    def inputs_written(self) -> tuple[torch.fx.Node, ...]:
        """Every input the update writes in place, the step count's included."""
        return self.written if self.count is None else (*self.written, self.count.step)

    @property
    def kernel_nodes(self) -> frozenset[torch.fx.Node]:
        """The nodes its kernels compute: none of them is lowered."""
        return self.replaced | set(self.write_backs)


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
    # The last write-back of each optimizer update run as a kernel -> the update.
    optimizer_updates: Mapping[torch.fx.Node, OptimizerUpdate] = field(
        default_factory=frozen_map
    )
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
            f"{len(self.optimizer_updates)} optimizer updates, "
            f"{len(self.repeated_kv)} attentions over repeated K/V, "
            f"{len(self.eager_layouts)} outputs in eager's layout"
        )
