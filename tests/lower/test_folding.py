"""Constant subexpressions (tensors computed from literals alone, such as a
causal mask built with arange) are computed by PyTorch when the graph is
planned and fed to MAX as inputs, so that MAX has nothing to fold at compile
time (its constant folding JIT-compiles a second set of kernels)."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import max_backend
from torch_max_backend.lower.builder import build_graph
from torch_max_backend.lower.builder.planning import InputPlan
from torch_max_backend.lower.passes import analyzed
from torch_max_backend.lower.passes.folding import MAX_FOLDED_BYTES
from torch_max_backend.plan import InputKind

from .aten_graphs import aten_graphs

aten = torch.ops.aten


def _causal_softmax(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    positions = torch.arange(x.shape[-1])
    mask = positions[:, None] >= positions[None, :]
    # The doubled positions are returned, and computed at planning too.
    return torch.where(mask, x, float("-inf")).softmax(-1), positions * 2


def _constants(plan: InputPlan) -> list[torch.Tensor]:
    return [
        plan.constants[s.index] for s in plan.sources if s.kind is InputKind.CONSTANT
    ]


def test_a_mask_built_from_arange_is_computed_at_planning():
    gm = aten_graphs(_causal_softmax, torch.randn(16, 16))[0]
    plan = InputPlan(gm, analyzed(gm))
    folded = plan.findings.constants.folded
    assert {n.target for n in folded} >= {
        aten.arange.default,
        aten.ge.Tensor,
        aten.mul.Tensor,
    }
    # The mask and the positions feed nodes MAX computes; both are inputs.
    fed = _constants(plan)
    mask = torch.arange(16)[:, None] >= torch.arange(16)[None, :]
    assert any(t.dtype == torch.bool and torch.equal(t, mask) for t in fed)
    # The returned doubled positions are an input too; the runtime hands the
    # caller a copy (tests/runtime/test_fresh_outputs.py).
    assert any(torch.equal(t, torch.arange(16) * 2) for t in fed)
    text = str(build_graph(gm).graph)
    assert "mo.range" not in text
    assert "mo.greater_equal" not in text


def test_random_ops_and_huge_values_stay_in_the_graph():
    huge = MAX_FOLDED_BYTES // 4 + 1

    def fn(x: torch.Tensor) -> torch.Tensor:
        noise = torch.rand(4)
        big = torch.arange(huge, dtype=torch.float32).sum()
        return x + noise + big

    gm = aten_graphs(fn, torch.randn(4))[0]
    plan = InputPlan(gm, analyzed(gm))
    targets = {n.target for n in plan.findings.constants.folded}
    assert aten.rand.default not in targets
    assert aten.arange.default not in targets
    assert aten.sum.default not in targets


def test_a_lone_fill_stays_a_splat_for_max():
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.maximum(x, torch.zeros(4))

    gm = aten_graphs(fn, torch.randn(4))[0]
    plan = InputPlan(gm, analyzed(gm))
    assert not plan.findings.constants.folded
    # Only the fill value, a lifted scalar, is an input; no [4] tensor.
    assert [t.shape for t in _constants(plan)] == [torch.Size([])]


@pytest.mark.usefixtures("count_max_compiles")
def test_folded_values_give_eager_s_results_and_fresh_outputs():
    compiled = torch.compile(
        _causal_softmax, backend=max_backend, options={"strict": True}
    )
    x = torch.randn(16, 16)
    want = _causal_softmax(x)
    got = compiled(x)
    torch.testing.assert_close(got, want)
    # A returned tensor is the caller's: writing into it changes no later call.
    got[1].fill_(-1)
    torch.testing.assert_close(compiled(x), want)
