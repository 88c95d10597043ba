"""MAX graphs built from one ATen graph, and which of its outputs keep eager's layout.

Deciding where a graph's nodes run builds every block once; compiling a block
then takes its MAX graph from here instead of building it again. The FX
passes' findings for a graph are kept here too, so that a warm start and a
build of the same graph share one run of the passes.
"""

from __future__ import annotations

import threading
import time

import torch
from torch._guards import TracingContext
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..lower.builder import (
    ALL_OUTPUTS,
    NO_OUTPUTS,
    BuiltGraph,
    CallerOutputs,
    GraphFindings,
    analyzed,
    build_analyzed,
)
from ..runtime.stats import record as record_stats

# One build at a time: background builders and the caller's thread share
# MAX's graph-building context.
_BUILD_LOCK = threading.Lock()


def caller_outputs(kind: str) -> CallerOutputs | None:
    """The outputs of an AOTAutograd graph of ``kind`` that reach the caller
    as the compiled graph returns them, and so keep eager's strides and
    aliasing (lower/passes/eager_layouts.py): every output of an inference
    graph; a training forward's user outputs, which AOTAutograd places after
    the inputs it mutates and before what it saves for the backward. For a
    backward, none: its gradients are autograd's to lay out, but those traced
    channels-last are written so, as a forward's saved tensors are
    (eager_layouts.py), which autograd then keeps as a channels-last
    parameter's gradient instead of copying it. None when AOTAutograd does
    not say (a forward compiled outside torch.compile)."""
    if kind == "inference":
        return ALL_OUTPUTS
    if kind == "backward":
        return NO_OUTPUTS
    context = TracingContext.try_get()
    meta = context.fw_metadata if context is not None else None
    if kind != "forward" or meta is None:
        return None
    start = meta.num_mutated_inp_runtime_indices
    return CallerOutputs(start, start + meta.num_outputs)


class GraphBuilds:
    """MAX graphs built for the ATen graph ``whole`` and its blocks, by structure.

    ``whole`` has been through the FX passes' rewrites (``rewritten``), and so
    has each block split from it. ``eager_layouts`` names the outputs of
    ``whole`` that keep eager's layout. A block's outputs feed PyTorch's part
    of a split graph as well as the caller: all of them keep it in an
    inference graph; in a training forward, where a block's outputs cannot be
    told from what the backward reads, none.
    """

    def __init__(
        self,
        whole: torch.fx.GraphModule,
        eager_layouts: CallerOutputs | None,
        summed_products: bool = True,
    ) -> None:
        self._whole = whole
        self._eager_layouts = eager_layouts
        self._summed_products = summed_products
        self._built: dict[tuple[tuple[str, str], ...], BuiltGraph] = {}
        # id(graph) -> (graph, its findings): findings name the graph's own
        # nodes, so they are kept per graph object (the graph kept alive).
        self._findings: dict[int, tuple[torch.fx.GraphModule, GraphFindings]] = {}

    def with_matmuls(self) -> GraphBuilds:
        """Builds of the same graphs with every product on MAX's matmul
        (the passes' findings shared: they do not depend on it)."""
        builds = GraphBuilds(self._whole, self._eager_layouts, summed_products=False)
        builds._findings = self._findings
        return builds

    def _layouts(self, gm: torch.fx.GraphModule) -> CallerOutputs | None:
        if gm is self._whole or self._eager_layouts == ALL_OUTPUTS:
            return self._eager_layouts
        return None

    def findings(self, gm: torch.fx.GraphModule) -> GraphFindings:
        """What the FX analysis passes find in ``gm``, run once per graph."""
        kept = self._findings.get(id(gm))
        if kept is None:
            with unset_fake_temporarily():  # folded constants are real tensors
                kept = (gm, analyzed(gm, self._layouts(gm)))
            self._findings[id(gm)] = kept
        return kept[1]

    def build(self, gm: torch.fx.GraphModule) -> BuiltGraph:
        key = tuple((n.op, n.name) for n in gm.graph.nodes)
        built = self._built.get(key)
        if built is None:
            # AOTAutograd calls compilers under its fake mode; constants and
            # scalar inputs must be real tensors.
            start = time.perf_counter()
            with _BUILD_LOCK, unset_fake_temporarily():
                built = build_analyzed(
                    gm, self.findings(gm), summed_products=self._summed_products
                )
            record_stats(graphs_built=1, build_seconds=time.perf_counter() - start)
            self._built[key] = built
        return built
