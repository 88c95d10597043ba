"""Our register-tiled product kernel (kernels/mojo_tiled) against eager: every
layout and edge it handles, a batch counted at run time, gradients through
it, and its place among the timed forms."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import explain, max_backend
from torch_max_backend.lower import product_choice
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for

from .product_layouts import (
    check_symbolic_batch,
    layout_inputs,
    layout_products,
    one_graph_matching_eager,
)

aten = torch.ops.aten
KERNEL = "torch_max_backend_tiled_matmul"


def _products(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every layout of product_layouts, then K empty against a Linear's
    weight, and a float64 product, which the kernel does not take."""
    empty_x, empty_w = inputs[5:7]
    x64, w64 = inputs[8:]
    return (
        *layout_products(*inputs[:8]),
        F.linear(empty_x, empty_w.t()),
        torch.mm(x64, w64),
    )


def _product_inputs() -> tuple[torch.Tensor, ...]:
    # Sizes off every tile: 13 rows (tiles of 6 and 4), K 37 (vectors of 16
    # or 8), N 70 (panels of 64, blocks of 6).
    return (
        *layout_inputs(rows=13, k=37, n=70),
        torch.randn(3, 5, dtype=torch.float64),
        torch.randn(5, 2, dtype=torch.float64),
    )


def test_the_tiled_kernel_matches_eager_in_every_layout(
    monkeypatch, max_calls, graph_texts
):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    inputs = _product_inputs()
    text = one_graph_matching_eager(max_calls, graph_texts, _products, inputs, "tiled")
    # Every float32 product in our kernel (the empty sums too: it writes the
    # zeros itself); the float64 one as the rules build it.
    assert text.count(KERNEL) == 6
    assert "mo.matmul" not in text
    # The rows read transposed go to the kernel as stored, with no copy.
    assert text.count("x_km = true") == 1
    report = explain(_products, *inputs, options={"product_strategy": "tiled"})
    strategies = [op.strategies for op in report.graphs[0].ops if op.strategies]
    # addmm (the Linear with a bias) and five float32 mm's in the kernel; the
    # float64 mm by the rules' strategy.
    assert sorted(strategies, key=len) == [{"tiled": 1}, {"matmul": 1, "tiled": 5}]


def test_the_tiled_kernel_counts_a_symbolic_batch_at_run_time(
    monkeypatch, max_calls, graph_texts
):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    check_symbolic_batch(
        max_calls, graph_texts, "tiled", KERNEL, k=37, n=70, batches=(3, 7, 13)
    )


def test_gradients_through_the_tiled_kernel_match_eager(monkeypatch, graph_texts):
    """A backward's products read a transposed gradient and a [K, N] input."""
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(37, 70), torch.nn.ReLU(), torch.nn.Linear(70, 5)
    )
    twin = torch.nn.Sequential(
        torch.nn.Linear(37, 70), torch.nn.ReLU(), torch.nn.Linear(70, 5)
    )
    twin.load_state_dict(model.state_dict())
    x = torch.randn(13, 37)
    compiled = torch.compile(
        model, backend=max_backend, options={"product_strategy": "tiled"}
    )
    compiled(x).square().sum().backward()
    twin(x).square().sum().backward()
    for got, want in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)
    forward, backward = graph_texts()
    assert forward.count(KERNEL) == 2
    # Two weights' gradients and the second layer's input gradient (x
    # needs none).
    assert backward.count(KERNEL) == 3
    assert "mo.matmul" not in forward + backward
    # Each weight's gradient dY^T @ X reads dY as stored.
    assert backward.count("x_km = true") == 2


@pytest.mark.measured_products
def test_the_tiled_kernel_is_timed_against_maxs_matmul(choice_table):
    """Timing checks its result against MAX's matmul's before timing it."""
    forms = ["matmul", "tiled"]
    shape = product_choice.ProductShape(rows=64, k=256, n=384, weight_nk=False)
    best = product_choice.measured(shape, forms)
    assert best in forms
    entry = product_choice.choices_here().get(shape.key(forms))
    assert set(entry["us"]) == set(forms)
    assert all(t > 0 for t in entry["us"].values())


@pytest.mark.measured_products
def test_auto_leaves_the_tiled_kernel_untimed(monkeypatch, choice_table):
    """It wins timings it loses inside a step (product_choice.UNTIMED)."""
    register_families()
    from torch_max_backend.kernels import product_timing

    timed = []

    def fake_timing(rows, k, n, weight_nk, forms, streamed=False, dtype=None):
        timed.append(tuple(forms))
        return {form: 1.0 for form in forms}

    monkeypatch.setattr(product_timing, "time_forms", fake_timing)
    gm = make_fx(F.linear, tracing_mode="fake")(
        torch.zeros(64, 512), torch.zeros(768, 512)
    )
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    assert strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node) != "tiled"
    assert timed and all("tiled" not in forms for forms in timed)
