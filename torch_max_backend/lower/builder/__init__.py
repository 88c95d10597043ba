"""Building a MAX graph from an FX ATen graph, one job a module.

``capability`` says whether every node can be lowered, ``planning`` decides
the graph's inputs, ``walk`` calls each node's lowering, and ``outputs``
writes the plan of the values the FX graph returns. They read what the FX
passes found (lower/passes/), run once before them, and never call a pass.
"""

from __future__ import annotations

import torch

from ..passes import (
    ALL_OUTPUTS,
    NO_OUTPUTS,
    STANDS_FOR,
    CallerOutputs,
    GraphFindings,
    analyzed,
    rewritten,
)
from .capability import (
    check_supported,
    computes_nothing,
    find_unsupported,
    is_size_arithmetic,
    strategy_of,
    why_unsupported,
)
from .device import graph_device
from .fingerprint import graph_fingerprint
from .higher_order import COVERAGE as HIGHER_ORDER_COVERAGE
from .planning import InputPlan
from .walk import GRAPH_NAME, BuiltGraph, NodeWalk

__all__ = [
    "ALL_OUTPUTS",
    "GRAPH_NAME",
    "HIGHER_ORDER_COVERAGE",
    "NO_OUTPUTS",
    "STANDS_FOR",
    "BuiltGraph",
    "CallerOutputs",
    "GraphFindings",
    "InputPlan",
    "analyzed",
    "build_analyzed",
    "build_graph",
    "check_supported",
    "computes_nothing",
    "find_unsupported",
    "graph_device",
    "graph_fingerprint",
    "is_size_arithmetic",
    "rewritten",
    "strategy_of",
    "why_unsupported",
]


def build_graph(
    gm: torch.fx.GraphModule,
    eager_layouts: CallerOutputs | None = None,
    summed_products: bool = True,
    channels_last_views: bool = True,
) -> BuiltGraph:
    """The MAX graph of ``gm`` and its plan; raises for what cannot be lowered.
    Runs every FX pass on ``gm`` first (``rewritten``, then ``analyzed``).
    The outputs ``eager_layouts`` names (those reaching the caller as they
    are) keep eager's strides and aliasing (passes/eager_layouts.py);
    ``summed_products`` lets small products be sums (lower/products.py);
    ``channels_last_views`` lets channels-last inputs be taken as they lie
    (channels_last_inputs.py)."""
    gm = rewritten(gm)
    return build_analyzed(
        gm, analyzed(gm, eager_layouts), summed_products, channels_last_views
    )


def build_analyzed(
    gm: torch.fx.GraphModule,
    findings: GraphFindings,
    summed_products: bool = True,
    channels_last_views: bool = True,
) -> BuiltGraph:
    """``build_graph`` of a graph already ``rewritten``, whose passes' findings
    are ``findings`` (its ``analyzed``): the way of a graph whose passes ran
    before (the backend takes a graph's fingerprint after its rewrites, and
    a warm start plans inputs from the same findings a build reads)."""
    from ..families import register_families

    register_families()
    check_supported([gm])
    plan = InputPlan(gm, findings, channels_last_views=channels_last_views)
    walk = NodeWalk(gm, plan, summed_products)
    built = walk.run()
    # Some lowering built index ranges from constants alone, which MAX would
    # evaluate at compile time: built again, they start at a runtime zero
    # (lower/index_origin.py; CPU graphs only, see there).
    wants_origin = walk.origin.wanted and plan.device.type == "cpu"
    # Small products built as sums beside a matmul: the graph pays the
    # matmul's compile anyway, so all are matmuls (lower/products.py).
    mixed = walk.products.mixed
    if wants_origin or mixed:
        # The same findings: the passes ran once for this graph.
        plan = InputPlan(
            gm,
            findings,
            index_origin=wants_origin,
            channels_last_views=channels_last_views,
        )
        sums = summed_products and not mixed
        walk = NodeWalk(gm, plan, summed_products=sums)
        built = walk.run()
    return built
