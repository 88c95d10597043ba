"""The FX passes run on an ATen graph before it is lowered, once each, in order.

A pass takes the graph and what the passes before it found, and returns a
rewritten graph (a rewrite) or its finding (an analysis). ``rewritten`` runs
the rewrites (before the graph's fingerprint is taken, so that a warm start
plans the graph that was built); ``analyzed`` runs the analyses and freezes
their findings into one ``GraphFindings``, which planning, the node walk and
the output plan read and never add to. Every rewrite precedes every analysis
in ``PASSES``: an analysis's nodes are the final graph's.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .eager_layouts import ALL_OUTPUTS, NO_OUTPUTS, CallerOutputs, find_eager_layouts
from .findings import (
    Coefficient,
    EagerLayout,
    FoldedConstants,
    GraphFindings,
    Mutations,
    OptimizerUpdate,
    SlotWrite,
)
from .folding import find_constants
from .foreach_adam import with_single_tensor_adam
from .foreach_unroll import unrolled_foreach
from .joint_saves import without_unread_saves
from .mutations import find_mutations, writes_input
from .optimizer_updates import find_optimizer_updates
from .repeated_kv import find_repeated_kv
from .repeats import without_repeats
from .rms_norms import with_rms_norms
from .sibling_products import STANDS_FOR, with_sibling_products
from .slot_writes import find_slot_writes
from .strided_copies import without_strided_copies

__all__ = [
    "ALL_OUTPUTS",
    "NO_OUTPUTS",
    "PASSES",
    "STANDS_FOR",
    "CallerOutputs",
    "Coefficient",
    "EagerLayout",
    "FoldedConstants",
    "GraphFindings",
    "GraphPass",
    "Mutations",
    "OptimizerUpdate",
    "SlotWrite",
    "analyzed",
    "rewritten",
    "without_unread_saves",
    "writes_input",
]

_log = logging.getLogger("torch_max_backend.lower.passes")


@dataclass(frozen=True)
class GraphPass:
    """One pass: ``run(gm, found)`` returns the rewritten graph (``rewrites``)
    or the finding kept as ``GraphFindings.<name>``."""

    name: str
    run: Callable[[torch.fx.GraphModule, GraphFindings], Any]
    rewrites: bool = False


# The declared order. An analysis may read what an earlier one found (slot
# writes go to inputs that mutations chose to write in place; the inputs
# optimizer kernels write are always among those).
PASSES: tuple[GraphPass, ...] = (
    # First: a restriding copy between two ops hides the pair from every
    # pattern after it.
    GraphPass(
        "strided_copies", lambda gm, found: without_strided_copies(gm), rewrites=True
    ),
    # Before the optimizer-update patterns look for each parameter's update:
    # a foreach optimizer's list ops unrolled, then its Adam denominators
    # rebuilt in the for-loop form.
    GraphPass("foreach_unroll", lambda gm, found: unrolled_foreach(gm), rewrites=True),
    GraphPass(
        "foreach_adam", lambda gm, found: with_single_tensor_adam(gm), rewrites=True
    ),
    # Before repeats: merging the squares of norms of one input would give
    # their chains shared inner nodes, which rms_norms leaves written out.
    GraphPass("rms_norms", lambda gm, found: with_rms_norms(gm), rewrites=True),
    GraphPass("repeats", lambda gm, found: without_repeats(gm), rewrites=True),
    # After repeats: a decode step's q, k and v read one input only once
    # repeats has merged the views each projection takes of it.
    GraphPass(
        "sibling_products", lambda gm, found: with_sibling_products(gm), rewrites=True
    ),
    GraphPass("optimizer_updates", find_optimizer_updates),
    GraphPass("mutations", find_mutations),
    GraphPass("constants", find_constants),
    GraphPass("slot_writes", find_slot_writes),
    GraphPass("repeated_kv", find_repeated_kv),
    GraphPass("eager_layouts", find_eager_layouts),
)


def _check_order(passes: tuple[GraphPass, ...]) -> None:
    kinds = [p.rewrites for p in passes]
    if kinds != sorted(kinds, reverse=True):
        raise AssertionError("every rewrite pass must come before every analysis")


_check_order(PASSES)


def rewritten(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` after every rewrite pass; ``gm`` itself when none changed it."""
    for graph_pass in PASSES:
        if graph_pass.rewrites:
            gm = graph_pass.run(gm, GraphFindings())
    return gm


def analyzed(
    gm: torch.fx.GraphModule, caller_outputs: CallerOutputs | None = None
) -> GraphFindings:
    """What every analysis pass finds in ``gm`` (already ``rewritten``), for
    a build whose ``caller_outputs`` keep eager's layout (eager_layouts.py)."""
    found = GraphFindings(caller_outputs=caller_outputs)
    for graph_pass in PASSES:
        if not graph_pass.rewrites:
            result = graph_pass.run(gm, found)
            found = dataclasses.replace(found, **{graph_pass.name: result})
    _log.debug("torch-max-backend: %s", found.summary())
    return found
