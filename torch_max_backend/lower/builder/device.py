"""The one device a graph runs on: that of its tensor inputs."""

from __future__ import annotations

from collections import Counter

import torch

from ...errors import MaxCompilerError
from ..kit import device_of


def graph_device(gm: torch.fx.GraphModule) -> torch.device:
    """The one device of the graph's tensor inputs (else of any tensor, else cpu)."""
    devices: Counter[torch.device] = Counter()
    for node in gm.graph.nodes:
        meta = node.meta.get("val")
        if node.op == "placeholder" and isinstance(meta, torch.Tensor):
            devices[device_of(meta)] += 1
    if len(devices) > 1:
        listing = ", ".join(str(d) for d in devices)
        raise MaxCompilerError(
            f"the graph's inputs are on several devices ({listing}); "
            "torch-max-backend compiles one graph per device: move the inputs "
            "and parameters to one device"
        )
    if devices:
        return next(iter(devices))
    for node in gm.graph.nodes:
        meta = node.meta.get("val")
        if isinstance(meta, torch.Tensor):
            return device_of(meta)
    return torch.device("cpu")
