"""Our bfloat16 product kernel on the CPU's bfloat16 pair dot products
(kernels/mojo_paired) against eager: every layout, odd and even K, the one
rounding of a sum with its bias, a batch counted at run time, gradients
through it, and its place among the timed forms."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import explain, max_backend
from torch_max_backend.kernels import pair_dot
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for

from .product_layouts import integer_linear, layout_inputs, layout_products

aten = torch.ops.aten
KERNEL = pair_dot.KERNEL

needs_pair_dot = pytest.mark.skipif(
    not pair_dot.has_pair_dot(), reason="no AVX512-BF16 on this CPU"
)


def _products(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every layout at three sizes: odd K (13 rows, K 37, N 70: tiles of 6,
    a panel of 64 and 6 more columns); even K wide enough for whole 16 x 16
    blocks of a Linear's weight and of rows read transposed (20 rows, K 96,
    N 150); and 5 rows, few enough for
    the rows-by-rows path through a Linear's weight, with a K of a step of
    32 and 8 more (K 40, N 24)."""
    return tuple(
        out
        for first in (0, 8, 16)
        for out in layout_products(*inputs[first : first + 8])
    )


def _inputs() -> tuple[torch.Tensor, ...]:
    sizes = [(13, 37, 70), (20, 96, 150), (5, 40, 24)]
    return tuple(
        t.bfloat16() for rows, k, n in sizes for t in layout_inputs(rows, k, n)
    )


def _assert_close_to_eager(got: torch.Tensor, want: torch.Tensor) -> None:
    """Both sum in float32 and round once, in orders of their own: a sum may
    land a unit of bfloat16 (2^-8 of its size) either side, or, where the
    terms cancel, a unit of the largest term."""
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=8e-3, atol=3e-2)


@needs_pair_dot
def test_the_paired_kernel_matches_eager_in_every_layout(
    monkeypatch, max_calls, graph_texts
):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    inputs = _inputs()
    compiled = torch.compile(
        _products, backend=max_backend, options={"product_strategy": "paired"}
    )
    for got, want in zip(compiled(*inputs), _products(*inputs), strict=True):
        _assert_close_to_eager(got, want)
    assert max_calls.count == 1
    (text,) = graph_texts()
    # Every product in our kernel, the empty sums too (it writes the zeros).
    assert text.count(KERNEL) == 15
    assert "mo.matmul" not in text
    # The rows read transposed go to the kernel as stored, with no copy.
    assert text.count("x_km = true") == 3
    report = explain(_products, *inputs, options={"product_strategy": "paired"})
    strategies = [op.strategies for op in report.graphs[0].ops if op.strategies]
    # Three addmm (the Linears with a bias) and twelve mm.
    assert sorted(strategies, key=len) == [{"paired": 3}, {"paired": 12}]


@needs_pair_dot
def test_sums_and_bias_are_rounded_once_as_torch_rounds(monkeypatch, graph_texts):
    """Integer operands make every float32 sum exact, so the rounding alone
    decides the result: to nearest, ties to even, after the bias (257 + 1
    gives 258 in bfloat16 where 257 rounded first would give 256); a NaN
    kept."""
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    linear, x = integer_linear(torch.bfloat16)
    x[2, 3] = float("nan")
    compiled = torch.compile(
        linear, backend=max_backend, options={"product_strategy": "paired"}
    )
    with torch.no_grad():
        got = compiled(x)
    exact = x.float() @ linear.weight.float().T + linear.bias.float()
    want = exact.bfloat16()
    assert (want.float() - exact).nan_to_num().abs().max() > 0  # some rounded
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num())
    (text,) = graph_texts()
    assert KERNEL in text and "mo.add" not in text  # the bias is the kernel's


@needs_pair_dot
def test_the_paired_kernel_counts_a_symbolic_batch_at_run_time(
    monkeypatch, max_calls, graph_texts
):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    torch.manual_seed(0)
    layer = torch.nn.Linear(37, 70).bfloat16().eval()
    compiled = torch.compile(
        layer, backend=max_backend, options={"product_strategy": "paired"}
    )
    for rows in (3, 7, 13):
        x = torch.randn(rows, 37).bfloat16()
        torch._dynamo.mark_dynamic(x, 0)
        with torch.no_grad():
            _assert_close_to_eager(compiled(x), layer(x))
    assert max_calls.count == 3
    (text,) = graph_texts()  # one graph for every batch
    assert KERNEL in text


@needs_pair_dot
def test_gradients_through_the_paired_kernel_match_eager(monkeypatch, graph_texts):
    """A backward's products read a transposed gradient (dY^T, the rows of a
    weight gradient) and the weight [N, K] as [K, N]."""
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    torch.manual_seed(0)
    layer = torch.nn.Linear(96, 70).bfloat16()
    x = torch.randn(13, 96).bfloat16().requires_grad_()
    compiled = torch.compile(
        layer, backend=max_backend, options={"product_strategy": "paired"}
    )
    compiled(x).float().square().sum().backward()
    got = (x.grad, layer.weight.grad, layer.bias.grad)
    x.grad = layer.weight.grad = layer.bias.grad = None
    layer(x).float().square().sum().backward()
    for g, w in zip(got, (x.grad, layer.weight.grad, layer.bias.grad), strict=True):
        # Sums of 13 to 70 terms of size ~10, each side rounding once.
        torch.testing.assert_close(g.float(), w.float(), rtol=8e-3, atol=0.3)
    backward = graph_texts()[-1]
    assert backward.count(KERNEL) == 2 and "mo.matmul" not in backward
    assert backward.count("x_km = true") == 1  # dY^T as dY is stored


@pytest.mark.measured_products
def test_the_paired_kernel_is_timed_only_where_the_cpu_has_pair_dots(
    monkeypatch, choice_table
):
    """A bfloat16 product is timed with the paired form where the CPU has
    AVX512-BF16; without it the form is not offered (its float32 fallback is
    no faster than MAX's matmul), and a forced product_strategy='paired'
    builds the rules' product, as an exported graph always does."""
    register_families()
    timed = []

    def fake_timing(rows, k, n, weight_nk, forms, streamed=False, dtype=None):
        timed.append(tuple(forms))
        return {form: (1.0 if form == "paired" else 9.0) for form in forms}

    from torch_max_backend.kernels import product_timing
    from torch_max_backend.lower import product_choice

    monkeypatch.setattr(product_timing, "time_forms", fake_timing)
    gm = make_fx(F.linear, tracing_mode="fake")(
        torch.zeros(64, 512, dtype=torch.bfloat16),
        torch.zeros(768, 512, dtype=torch.bfloat16),
    )
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    lower = MAPPING_TORCH_ATEN_TO_MAX[node.target]
    monkeypatch.setattr(pair_dot, "has_pair_dot", lambda: True)
    assert strategy_for(lower, node) == "paired"
    assert "paired" in timed[-1]
    monkeypatch.setattr(pair_dot, "has_pair_dot", lambda: False)
    assert strategy_for(lower, node) != "paired"
    assert all("paired" not in forms for forms in timed[1:])
    monkeypatch.setattr(product_choice, "_setting", "paired")
    assert strategy_for(lower, node) == "matmul"
    # An exported package, compiled here, may run on a CPU without them.
    monkeypatch.setattr(pair_dot, "has_pair_dot", lambda: True)
    assert strategy_for(lower, node) == "paired"
    with product_choice.portable_products():
        assert strategy_for(lower, node) == "matmul"


@needs_pair_dot
@pytest.mark.measured_products
@pytest.mark.parametrize("weight_nk", [True, False], ids=["nk", "kn"])
def test_real_timing_of_the_paired_form_agrees_with_max_matmul(choice_table, weight_nk):
    from torch_max_backend.kernels import product_timing

    # time_forms checks every form's result against the first form's.
    times = product_timing.time_forms(
        24, 256, 80, weight_nk, ["matmul", "paired"], dtype=torch.bfloat16
    )
    assert set(times) == {"matmul", "paired"} and all(t > 0 for t in times.values())
