"""The ATen graphs AOTAutograd hands a backend, captured without compiling
them, for tests of how the builder plans and builds a graph."""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd

from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import decomposition_table


def aten_graphs(
    fn: Any, *inputs: torch.Tensor, train: bool = False, **aot_options: Any
) -> list[torch.fx.GraphModule]:
    """The graphs of ``fn(*inputs)``: its inference graph, or with ``train``
    its forward and backward (``fn`` returns a scalar to call backward on)."""
    graphs = []

    def keep(gm: torch.fx.GraphModule, _: object) -> torch.fx.GraphModule:
        graphs.append(gm)
        return gm

    register_families()
    backend = aot_autograd(
        fw_compiler=keep,
        bw_compiler=keep,
        decompositions=decomposition_table(),
        **aot_options,
    )
    compiled = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)
    if train:
        compiled(*inputs).backward()
    else:
        with torch.no_grad():
            compiled(*inputs)
    return graphs
