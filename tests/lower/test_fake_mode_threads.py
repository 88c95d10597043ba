"""Graphs are built on threads of ours (a product upgrade, a background
compile) while Dynamo traces on its own, over the fake tensors of one fake
mode. While any thread runs a kernel in that mode, every one of its fake
tensors reads its ``device`` as "meta", and another thread entering a
kernel of it fails torch's own check. So a build reads a fake tensor's
device as traced (``kit.device_of``) and runs no fake kernel: a
channels-last MobileNetV2's loss gradient fell back to PyTorch now and then
(a copy "between devices, meta -> cpu") while a product upgrade took its
channels-last inputs' shapes from a fake op."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend.lower.builder import build_graph
from torch_max_backend.lower.builder.fingerprint import graph_fingerprint
from torch_max_backend.plan import InputKind

from .aten_graphs import aten_graphs


def _conv_to_double(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # A convolution (its strategy asks the device) of a channels-last input
    # (taken as it lies), then a copy naming its device.
    return F.conv2d(x, w, padding=1).to(dtype=torch.float64, device="cpu")


def test_a_graph_builds_alike_while_another_thread_is_in_a_fake_kernel():
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    (gm,) = aten_graphs(_conv_to_double, x, torch.randn(4, 3, 3, 3))
    assert any(n.target is torch.ops.aten._to_copy.default for n in gm.graph.nodes)
    expected, fingerprint = build_graph(gm), graph_fingerprint(gm)
    mode = next(
        n.meta["val"].fake_mode for n in gm.graph.nodes if n.op == "placeholder"
    )
    mode.in_kernel_invocation = True  # as while Dynamo's thread runs a kernel
    try:
        built, again = build_graph(gm), graph_fingerprint(gm)
    finally:
        mode.in_kernel_invocation = False
    assert built.plan.inputs[0].kind is InputKind.CHANNELS_LAST
    assert built.plan == expected.plan
    assert str(built.graph) == str(expected.graph)
    assert again == fingerprint
