"""The pass finding optimizer updates that run as one in-place kernel each.

An optimizer step lowered op by op stores each new value (parameter,
moments, momentum buffer) in a kernel of its own that reads its inputs
again; our kernels read each value once and write each once, as PyTorch's
fused optimizers do. Each pattern lives in a module of its own
(adam_updates.py, sgd_updates.py, rmsprop_updates.py); the walk runs the kernel at the update's
last write-back (builder/optimizer_store.py), and mutations buffers the
inputs it writes outside its budget.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .adam_updates import match_adam
from .findings import GraphFindings, OptimizerUpdate, frozen_map
from .rmsprop_updates import match_rmsprop
from .sgd_updates import match_sgd

MATCHERS = (match_adam, match_sgd, match_rmsprop)


def find_optimizer_updates(
    gm: torch.fx.GraphModule, found: GraphFindings
) -> Mapping[torch.fx.Node, OptimizerUpdate]:
    """Each update found, by the last of its write-backs in graph order
    (where the walk runs its kernel: its tensor coefficients are built by then)."""
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    updates = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        for match in MATCHERS:
            update = match(node)
            if update is not None:
                updates[max(update.write_backs, key=order.__getitem__)] = update
                break
    return frozen_map(updates)
