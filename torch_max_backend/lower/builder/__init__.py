"""Building a MAX graph from an FX ATen graph, one job a module.

``capability`` says whether every node can be lowered, ``repeats`` merges
repeated subexpressions, ``planning`` decides the graph's inputs, ``walk``
calls each node's lowering, and ``outputs`` writes the plan of the values the
FX graph returns.
"""

from __future__ import annotations

import torch

from .capability import (
    check_supported,
    computes_nothing,
    find_unsupported,
    is_size_arithmetic,
    strategy_of,
    why_unsupported,
)
from .eager_layouts import ALL_OUTPUTS, CallerOutputs
from .fingerprint import graph_fingerprint
from .planning import InputPlan, graph_device
from .repeats import without_repeats
from .walk import GRAPH_NAME, BuiltGraph, NodeWalk

__all__ = [
    "ALL_OUTPUTS",
    "GRAPH_NAME",
    "BuiltGraph",
    "CallerOutputs",
    "InputPlan",
    "build_graph",
    "check_supported",
    "computes_nothing",
    "find_unsupported",
    "graph_device",
    "graph_fingerprint",
    "is_size_arithmetic",
    "strategy_of",
    "why_unsupported",
    "without_repeats",
]


def build_graph(
    gm: torch.fx.GraphModule,
    eager_layouts: CallerOutputs | None = None,
    summed_products: bool = True,
) -> BuiltGraph:
    """The MAX graph of ``gm`` and its plan; raises for what cannot be lowered.
    The outputs ``eager_layouts`` names (those reaching the caller as they
    are) keep eager's strides and aliasing (eager_layouts.py);
    ``summed_products`` lets small products be sums (lower/products.py)."""
    from ..families import register_families

    register_families()
    check_supported([gm])
    gm = without_repeats(gm)
    plan = InputPlan(gm)
    walk = NodeWalk(gm, plan, eager_layouts, summed_products)
    built = walk.run()
    # Some lowering built index ranges from constants alone, which MAX would
    # evaluate at compile time: built again, they start at a runtime zero
    # (lower/index_origin.py; CPU graphs only, see there).
    wants_origin = walk.origin.wanted and plan.device.type == "cpu"
    # Small products built as sums beside a matmul: the graph pays the
    # matmul's compile anyway, so all are matmuls (lower/products.py).
    mixed = walk.products.mixed
    if wants_origin or mixed:
        plan = InputPlan(gm, index_origin=wants_origin)
        sums = summed_products and not mixed
        walk = NodeWalk(gm, plan, eager_layouts, summed_products=sums)
        built = walk.run()
    return built
