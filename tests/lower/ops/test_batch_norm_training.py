"""A training batch norm's forward and backward, each one kernel on the CPU.

Training steps through batch norms in every layout a value reaches them in
(a convolution's channels-last result, a 1x1 convolution's product, [N, C]
and [N, C, L] inputs), against eager: the loss, every gradient and the
running statistics the step updated.
"""

from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

from .family_check import check_family
from .helpers import check_training_step

# The backward op appears only in backward graphs, which no OpInfo case builds.
TESTED_BY_HAND = ("aten.native_batch_norm_backward.default",)


def test_batch_norm_training_lowerings_build_for_every_opinfo_case():
    check_family("batch_norm_training", TESTED_BY_HAND)


class BatchNormNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # 20 channels and 9x9 pixels: the kernels' vector loops and their tails.
        self.conv = torch.nn.Conv2d(3, 20, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(20)
        self.pointwise = torch.nn.Conv2d(20, 20, 1)
        self.bn_plain = torch.nn.BatchNorm2d(20, affine=False, momentum=0.3)
        # A depthwise convolution's result is channels-last (MAX's conv2d).
        self.depthwise = torch.nn.Conv2d(20, 20, 3, padding=1, groups=20)
        self.bn_last = torch.nn.BatchNorm2d(20)
        self.bn_rows = torch.nn.BatchNorm1d(20)
        self.bn_seq = torch.nn.BatchNorm1d(4, eps=1e-3)

    def forward(
        self, x: torch.Tensor, rows: torch.Tensor, seq: torch.Tensor
    ) -> torch.Tensor:
        h = F.relu(self.bn(self.conv(x)))
        h = torch.tanh(self.bn_plain(self.pointwise(h)))
        h = self.bn_last(self.depthwise(h))
        r = torch.sigmoid(self.bn_rows(rows))
        s = self.bn_seq(seq)
        return (h * h).mean() + r.pow(2).mean() + (s * s.detach()).mean()


def test_batch_norm_training_step_matches_eager(max_calls, built_graphs, graph_texts):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 9) * 3 + 1
    check_training_step(BatchNormNet(), x, torch.randn(5, 20), torch.randn(3, 4, 7))
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
    # The backward never reads the running statistics the forward updated,
    # so the forward does not save them for it (lower/passes/joint_saves.py):
    # it returns the loss and the backward's own inputs, no running vector.
    (forward_gm, _), (backward_gm, _) = built_graphs
    backward_ops = [
        n for n in backward_gm.graph.nodes if "batch_norm_backward" in str(n.target)
    ]
    assert len(backward_ops) == 5
    assert all(n.args[3] is None and n.args[4] is None for n in backward_ops)
    running = {
        n.name
        for n in forward_gm.graph.nodes
        if n.target is operator.getitem
        and "batch_norm" in str(n.args[0].target)
        and n.args[1] in (3, 4)
    }
    saved = {n.name for n in backward_gm.graph.nodes if n.op == "placeholder"}
    assert len(running) == 10 and not running & saved
    forward, backward = graph_texts()
    # Each of the five batch norms: one statistics kernel, one backward
    # kernel, and no reductions of MAX's own in its place: the forward's
    # only means are the loss's three.
    assert forward.count('"torch_max_backend_batch_norm_stats"') == 5
    assert backward.count('"torch_max_backend_batch_norm_backward"') == 5
    assert forward.count("rmo.mo.reduce.mean") == 3


class FrozenBatchNorm(torch.nn.Module):
    """Batch norms in evaluation mode inside a training step (fine-tuning a
    pretrained network with its statistics frozen)."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(5)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)
        self.bn.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.bn(x)).pow(2).mean()


def test_frozen_batch_norm_gradients_match_eager(max_calls):
    torch.manual_seed(0)
    check_training_step(FrozenBatchNorm(), torch.randn(2, 5, 4, 4))
    assert max_calls.of("backward") == 1


def test_composed_batch_norm_matches_eager(max_calls, graph_texts, monkeypatch):
    # What a GPU builds (the kernels are the CPU's), checked on the CPU.
    from torch_max_backend.lower.ops import batch_norm_training

    monkeypatch.setattr(batch_norm_training, "_kernels_serve", lambda dtype: False)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 9) * 3 + 1
    check_training_step(BatchNormNet(), x, torch.randn(5, 20), torch.randn(3, 4, 7))
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
    assert not any("torch_max_backend_batch_norm" in t for t in graph_texts())


class DoubleBatchNormNet(BatchNormNet):
    def __init__(self) -> None:
        super().__init__()
        self.double()


def test_float64_batch_norm_trains_in_float64(max_calls, graph_texts):
    # torch computes a float64 batch norm in float64; statistics rounded
    # through float32 were about 1e-7 off relative.
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 9, dtype=torch.float64) * 3 + 1
    rows = torch.randn(5, 20, dtype=torch.float64)
    seq = torch.randn(3, 4, 7, dtype=torch.float64)
    check_training_step(DoubleBatchNormNet(), x, rows, seq, rtol=1e-11, atol=1e-12)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
    assert not any("torch_max_backend_batch_norm" in t for t in graph_texts())
