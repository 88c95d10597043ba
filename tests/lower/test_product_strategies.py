"""Products' strategies forced by product_strategy and shown by explain(), and
the vendor BLAS path (MKL through our Mojo kernel) against eager; choosing
by timing is in test_product_timing.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from vendor_marks import needs_vendor, vendor_multiplies

from torch_max_backend import explain, max_backend
from torch_max_backend.dtypes import dtype_name
from torch_max_backend.kernels import vendor_blas
from torch_max_backend.lower import product_choice
from torch_max_backend.lower.builder.fingerprint import graph_fingerprint
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for

from .product_layouts import (
    check_symbolic_batch,
    integer_linear,
    layout_inputs,
    layout_products,
    one_graph_matching_eager,
)

aten = torch.ops.aten


def _products(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every layout the vendor kernel reads."""
    return layout_products(*inputs)


def _product_inputs() -> tuple[torch.Tensor, ...]:
    return layout_inputs(rows=5, k=40, n=24)


@needs_vendor
def test_the_vendor_path_matches_eager_in_every_layout(
    monkeypatch, max_calls, graph_texts
):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    inputs = _product_inputs()
    text = one_graph_matching_eager(max_calls, graph_texts, _products, inputs, "vendor")
    # All five in our kernel (the empty sum too: it writes zeros itself).
    assert text.count("torch_max_backend_vendor_matmul") == 5
    assert "mo.matmul" not in text


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_products_take_the_vendor_path_in_every_layout(
    monkeypatch, max_calls, graph_texts, dtype
):
    if not vendor_multiplies(dtype_name(dtype)):
        pytest.skip(f"no vendor BLAS with {dtype} products here")
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    inputs = tuple(t.to(dtype) for t in layout_inputs(rows=5, k=40, n=24))
    compiled = torch.compile(
        _products, backend=max_backend, options={"product_strategy": "vendor"}
    )
    got, want = compiled(*inputs), _products(*inputs)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype
        # Both round a float32 sum once: at most one unit apart.
        torch.testing.assert_close(g, w, rtol=8e-3, atol=1e-5)
    assert max_calls.count == 1
    (text,) = graph_texts()
    assert text.count("torch_max_backend_vendor_matmul") == 5
    assert "mo.matmul" not in text


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("frozen", [False, True], ids=["vendor", "vendor_packed"])
def test_half_precision_sums_are_rounded_as_torch_rounds(monkeypatch, dtype, frozen):
    """Integer operands make every float32 sum exact (2049, 2051, ...), so the
    rounding alone decides the result: to nearest, ties to even, NaN kept."""
    if not vendor_multiplies(dtype_name(dtype)):
        pytest.skip(f"no vendor BLAS with {dtype} products here")
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    gen = torch.Generator().manual_seed(0)
    # Sums up to 64000: past float16's exact integers (2048), not its range.
    x = torch.randint(-40, 41, (6, 40), generator=gen).to(dtype)
    w = torch.randint(-40, 41, (40, 40), generator=gen).to(dtype)
    x[2, 3] = float("nan")
    # 40 columns: a vector of 16 and the rest one by one, in one task.
    strategy = "vendor_packed" if frozen else "vendor"
    compiled = torch.compile(
        torch.mm,
        backend=max_backend,
        options={"product_strategy": strategy, "frozen_weights": frozen},
    )
    with torch.no_grad():
        got = compiled(x, w)
    sums = x.float() @ w.float()
    want = sums.to(dtype)
    assert (want.float() - sums).nan_to_num().abs().max() > 0  # some rounded
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("frozen", [False, True], ids=["vendor", "vendor_packed"])
def test_a_bias_is_summed_with_the_product_and_rounded_once(
    monkeypatch, graph_texts, dtype, frozen
):
    """As PyTorch's addmm: the bias joins the float32 sums, one rounding
    (257 + 1 gives 258 in bfloat16 where 257 rounded first would give 256)."""
    found = vendor_blas.vendor_blas()
    if found is None or not (
        dtype == torch.float32 or vendor_multiplies(dtype_name(dtype))
    ):
        pytest.skip(f"no vendor BLAS with {dtype} products here")
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    linear, x = integer_linear(dtype)
    strategy = "vendor_packed" if frozen else "vendor"
    compiled = torch.compile(
        linear,
        backend=max_backend,
        options={"product_strategy": strategy, "frozen_weights": frozen},
    )
    with torch.no_grad():
        got = compiled(x)
    exact = x.float() @ linear.weight.float().T + linear.bias.float()
    assert torch.equal(got, exact.to(dtype))
    (text,) = graph_texts()
    assert "mo.add" not in text  # the bias is the kernel's


@needs_vendor
def test_the_vendor_path_counts_a_symbolic_batch_at_run_time(
    monkeypatch, max_calls, graph_texts
):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    check_symbolic_batch(
        max_calls,
        graph_texts,
        "vendor",
        "torch_max_backend_vendor_matmul",
        k=40,
        n=24,
        batches=(3, 7, 5),
    )


def test_without_a_vendor_library_products_fall_back_with_the_same_results(
    monkeypatch, max_calls, graph_texts
):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    monkeypatch.setenv(vendor_blas.ENV, "off")
    vendor_blas.vendor_blas.cache_clear()
    try:
        inputs = _product_inputs()
        compiled = torch.compile(
            _products, backend=max_backend, options={"product_strategy": "vendor"}
        )
        for got, want in zip(compiled(*inputs), _products(*inputs), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    finally:
        vendor_blas.vendor_blas.cache_clear()
    assert max_calls.count == 1
    assert "torch_max_backend_vendor_matmul" not in graph_texts()[0]


def test_a_named_library_that_is_not_mkl_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(vendor_blas.ENV, str(tmp_path / "libnothing.so"))
    vendor_blas.vendor_blas.cache_clear()
    try:
        with pytest.raises(ValueError, match="TORCH_MAX_BACKEND_VENDOR_BLAS="):
            vendor_blas.vendor_blas()
    finally:
        vendor_blas.vendor_blas.cache_clear()


def test_the_chosen_strategy_is_part_of_the_fingerprint():
    register_families()
    gm = make_fx(F.linear, tracing_mode="fake")(
        torch.zeros(8, 512), torch.zeros(768, 512)
    )
    product_choice.set_product_strategy("matmul")
    as_matmul = graph_fingerprint(gm)
    product_choice.set_product_strategy("skinny")
    as_skinny = graph_fingerprint(gm)
    product_choice.set_product_strategy("rule")
    assert as_matmul is not None and as_skinny is not None
    assert as_matmul != as_skinny
    assert graph_fingerprint(gm) == as_skinny  # the rule picks skinny here


def test_explain_shows_the_forced_strategy(monkeypatch):
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    layer = torch.nn.Linear(512, 768).eval()
    with torch.no_grad():
        report = explain(
            layer, torch.randn(8, 512), options={"product_strategy": "matmul"}
        )
    (graph,) = report.graphs
    (op,) = [op for op in graph.ops if op.op == "aten.addmm.default"]
    assert op.strategies == {"matmul": 1}
    with torch.no_grad():
        report = explain(
            layer, torch.randn(8, 512), options={"product_strategy": "rule"}
        )
    (op,) = [op for op in report.graphs[0].ops if op.op == "aten.addmm.default"]
    assert op.strategies == {"skinny": 1}


def test_exported_graphs_take_no_vendor_path():
    register_families()
    gm = make_fx(F.linear, tracing_mode="fake")(
        torch.zeros(8, 512), torch.zeros(768, 512)
    )
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    lower = MAPPING_TORCH_ATEN_TO_MAX[node.target]
    product_choice.set_product_strategy("vendor")
    try:
        with product_choice.portable_products():
            assert strategy_for(lower, node) == "skinny"
        if vendor_blas.vendor_blas() is not None:
            assert strategy_for(lower, node) == "vendor"
    finally:
        product_choice.set_product_strategy("rule")
