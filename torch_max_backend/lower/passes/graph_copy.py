"""A rewrite pass's working copy of an FX graph."""

from __future__ import annotations

import torch


def graph_copy(
    gm: torch.fx.GraphModule,
) -> tuple[torch.fx.Graph, dict[torch.fx.Node, torch.fx.Node]]:
    """A copy of ``gm``'s graph to rewrite, and each node's copy: the
    caller's graph stays as it was (it may still run in PyTorch)."""
    graph = torch.fx.Graph()
    graph._codegen = gm.graph._codegen
    copies: dict[torch.fx.Node, torch.fx.Node] = {}
    returned, output = graph.graph_copy(gm.graph, copies, return_output_node=True)
    graph.output(returned).meta = dict(output.meta)
    return graph, copies
