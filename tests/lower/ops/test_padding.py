"""Constant, reflection and replication padding: the family's build check,
and the gradient of replication padding against eager autograd's.

Numerics of the forward ops are compared with eager PyTorch by the OpInfo
sweep (tests/opinfo); this module checks that every case reaching the
family builds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import explain, max_backend

from .family_check import check_family

aten = torch.ops.aten

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten.reflection_pad2d.default",
    "aten.reflection_pad3d.default",
    "aten.replication_pad3d.default",
    "aten.replication_pad1d_backward.default",
    "aten.replication_pad2d_backward.default",
    "aten.replication_pad3d_backward.default",
)


def test_padding_lowerings_build_for_every_opinfo_case():
    check_family("padding", OUTSIDE_OPINFO)


# (input shape, padding): pads wider than the dim, a dim of one and of two
# elements (whose edges gather every pad), one side only, and 3-d.
REPLICATION = [
    ((2, 3, 7), (2, 4)),
    ((2, 3, 5, 4), (3, 1, 0, 6)),
    ((1, 2, 1, 2), (2, 2, 3, 1)),
    ((2, 2, 3, 4, 2), (1, 0, 2, 2, 0, 3)),
]
BACKWARD = {
    3: aten.replication_pad1d_backward,
    4: aten.replication_pad2d_backward,
    5: aten.replication_pad3d_backward,
}


def _replication_grads(*tensors: torch.Tensor) -> list[torch.Tensor]:
    grads = []
    for i, (_, padding) in enumerate(REPLICATION):
        g, x = tensors[2 * i : 2 * i + 2]
        grads.append(BACKWARD[x.dim()](g, x, padding))
    return grads


def test_replication_padding_gradients_match_eager(max_calls):
    torch.manual_seed(0)
    tensors = []
    for shape, padding in REPLICATION:
        x = torch.randn(shape)
        tensors += [torch.randn_like(F.pad(x, padding, mode="replicate")), x]
    compiled = torch.compile(
        _replication_grads, backend=max_backend, options={"strict": True}
    )
    got, want = compiled(*tensors), _replication_grads(*tensors)
    for i, (g, e) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g, e, msg=lambda m, i=i: f"{i}: {m}")
    assert max_calls.of("inference") == 1


def test_replicate_padded_convolution_trains_on_max():
    # Conv2d(padding_mode="replicate") pads by replication_pad2d: its
    # gradient is in the backward graph once a layer before it trains.
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 2, 1),
        torch.nn.Conv2d(2, 3, 3, padding=1, padding_mode="replicate"),
    )
    report = explain(lambda x: model(x).sum(), torch.randn(1, 2, 6, 6), training=True)
    ops = {op.op for graph in report.graphs for op in graph.ops}
    assert "aten.replication_pad2d_backward.default" in ops
    assert report.unsupported == {}


def test_replication_padding_gradient_by_negative_amounts_is_named():
    # torch crops by a negative amount; its gradient stays in PyTorch, named.
    weight = torch.nn.Parameter(torch.randn(2, 5))
    report = explain(
        lambda x: F.pad(x * weight, (-1, 2), mode="replicate").sum(),
        torch.randn(2, 5),
        training=True,
    )
    (refused,) = (op for graph in report.graphs for op in graph.ops if not op.on_max)
    assert refused.op == "aten.replication_pad1d_backward.default"
    assert "negative amounts" in refused.reason
