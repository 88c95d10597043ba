"""Our few-rows kernel that prefetches the weight it reads next
(kernels/mojo_streamed) against eager in both layouts, and products timed
with their weights read from memory."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import max_backend
from torch_max_backend.kernels import product_timing
from torch_max_backend.lower import product_choice
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.product_kernels import streamed_fits
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for
from torch_max_backend.storage import product_choices

aten = torch.ops.aten
KERNEL = "torch_max_backend_streamed_matmul"


def _products(x, w_kn, w_nk, bias, w_wide):
    """[K, N] weights at 1, 3 and 8 rows (with addmm's scales), a view that
    is not a stored weight, a Linear's [N, K] weight at 8 and 5 rows, and a
    weight wider than one row's tile at 1 and 3 rows."""
    return (
        torch.mm(x[:1], w_kn),
        torch.mm(x[:1], w_wide),
        torch.mm(x[:3], w_wide),
        torch.addmm(bias, x[:3], w_kn, beta=0.5, alpha=2.0),
        torch.mm(x, w_kn) + 1,
        torch.mm(x[:2], torch.cat([w_kn, w_kn], 1)[:, ::2]),
        F.linear(x, w_nk, bias),
        F.linear(x[:5], w_nk[:-1]),  # 1099 rows: a block ends on one
    )


def test_the_streamed_kernel_matches_eager(monkeypatch, max_calls, graph_texts):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    torch.manual_seed(0)
    # K 521 (slices of 131 rows: groups of 4 and a tail of 3; vectors of 16
    # and a tail of 9), N 1100 (at 8 rows tiles of 512 and one of 76, at 1
    # and 3 rows one tile; 32-column steps and a tail of 12; blocks of 2
    # [N, K] rows); N 4300 (at 1 row a tile of 4096 and one of 204, at 3
    # rows three tiles of about 1350 and a narrower last).
    x, w_kn = torch.randn(8, 521), torch.randn(521, 1100)
    w_nk, bias = torch.randn(1100, 521), torch.randn(1100)
    w_wide = torch.randn(521, 4300)
    compiled = torch.compile(
        _products,
        backend=max_backend,
        fullgraph=True,
        options={"product_strategy": "streamed", "strict": True},
    )
    got = compiled(x, w_kn, w_nk, bias, w_wide)
    want = _products(x, w_kn, w_nk, bias, w_wide)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert max_calls.of("inference") == 1
    (text,) = graph_texts()
    assert text.count(KERNEL) == 8
    assert text.count("weight_nk = true") == 2


def test_the_streamed_kernel_counts_a_symbolic_batch_at_run_time(
    monkeypatch, max_calls, graph_texts
):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    torch.manual_seed(0)
    w_kn, w_nk = torch.randn(260, 130), torch.randn(130, 260)

    def products(x, w_kn, w_nk):
        return torch.mm(x, w_kn), F.linear(x, w_nk)

    compiled = torch.compile(
        products, backend=max_backend, options={"product_strategy": "streamed"}
    )
    for rows in (2, 5, 19, 8):
        x = torch.randn(rows, 260)
        torch._dynamo.mark_dynamic(x, 0)
        got, want = compiled(x, w_kn, w_nk), products(x, w_kn, w_nk)
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    (text,) = graph_texts()  # one graph: blocks of 8 rows, then the rest
    assert text.count(KERNEL) == 2 and "rows = 0 : index" in text
    assert max_calls.count == 4


@pytest.mark.parametrize(
    ("fn", "inputs", "fits"),
    [
        (torch.mm, (torch.zeros(1, 512), torch.zeros(512, 768)), True),
        (F.linear, (torch.zeros(2, 512), torch.zeros(768, 512)), True),
        (F.linear, (torch.zeros(1, 512), torch.zeros(768, 512)), False),
        (torch.mm, (torch.zeros(9, 512), torch.zeros(512, 768)), False),
    ],
    ids=["one-row-kn", "two-rows-linear", "one-row-linear", "nine-rows"],
)
def test_where_the_streamed_kernel_fits(fn, inputs, fits):
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    assert (streamed_fits(node) is None) == fits


def _graph_holding(mib: int) -> torch.fx.Graph:
    """A decode-like product beside a fake cache tensor of ``mib`` MiB."""

    def step(x, w, cache):
        return torch.mm(x, w) + cache[:1, :768]

    elements = mib * 2**20 // 4
    gm = make_fx(step, tracing_mode="fake")(
        torch.zeros(8, 768), torch.zeros(768, 768), torch.zeros(elements // 768, 768)
    )
    return gm.graph


def test_graphs_that_outgrow_the_cache_time_their_products_streamed(
    monkeypatch, choice_table
):
    monkeypatch.setattr(product_choices, "last_level_cache_bytes", lambda: 32 << 20)
    monkeypatch.setattr(product_choice, "last_level_cache_bytes", lambda: 32 << 20)
    assert not product_choice.weights_stream(_graph_holding(16))
    assert product_choice.weights_stream(_graph_holding(64))
    # The timing is asked for streamed weights, and keeps them apart.
    asked = []

    def timed(rows, k, n, weight_nk, forms, streamed=False, dtype=None):
        asked.append(streamed)
        return {form: (1.0 if form == "streamed" else 2.0) for form in forms}

    monkeypatch.setattr(product_timing, "time_forms", timed)
    register_families()
    product_choice.set_product_strategy("auto")
    try:
        graph = _graph_holding(64)
        (node,) = [n for n in graph.nodes if n.target is aten.mm.default]
        assert strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node) == "streamed"
    finally:
        product_choice.set_product_strategy("rule")
    assert asked == [True]
    keys = list(product_choice.choices_here()._loaded())
    assert len(keys) == 1 and " kn streamed " in keys[0]


def test_an_unknown_cache_size_times_products_in_the_cache(monkeypatch):
    monkeypatch.setattr(product_choice, "last_level_cache_bytes", lambda: None)
    assert not product_choice.weights_stream(_graph_holding(1024))


@pytest.mark.measured_products
def test_streamed_timing_reads_copies_of_the_weight(choice_table):
    forms = ["skinny", "streamed"]
    times = product_timing.time_forms(8, 768, 2304, False, forms, streamed=True)
    assert set(times) == set(forms) and all(t > 0 for t in times.values())
    cache = product_choices.last_level_cache_bytes() or 0
    copies = product_timing._weight_copies(torch.ones(768, 2304), True)
    assert len(copies) * 768 * 2304 * 4 > 2 * cache
    assert len(product_timing._weight_copies(torch.ones(8, 8), False)) == 1
