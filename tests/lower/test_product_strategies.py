"""Products' strategies chosen by measurement, forced by product_strategy, and
the vendor BLAS path (MKL through our Mojo kernel) against eager."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import explain, max_backend
from torch_max_backend.dtypes import dtype_name
from torch_max_backend.kernels import vendor_blas
from torch_max_backend.lower import product_choice
from torch_max_backend.lower.builder.fingerprint import graph_fingerprint
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for
from torch_max_backend.storage import product_choices

from .product_layouts import (
    check_symbolic_batch,
    layout_inputs,
    layout_products,
    one_graph_matching_eager,
)

aten = torch.ops.aten
needs_vendor = pytest.mark.skipif(
    vendor_blas.vendor_blas() is None, reason="no vendor BLAS (mkl) here"
)


def _vendor_multiplies(kind: str) -> bool:
    found = vendor_blas.vendor_blas()
    return found is not None and kind in found.half_types


needs_vendor_bfloat16 = pytest.mark.skipif(
    not _vendor_multiplies("bfloat16"),
    reason="no vendor BLAS with bfloat16 products here",
)


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
    if not _vendor_multiplies(dtype_name(dtype)):
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
    if not _vendor_multiplies(dtype_name(dtype)):
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
        dtype == torch.float32 or _vendor_multiplies(dtype_name(dtype))
    ):
        pytest.skip(f"no vendor BLAS with {dtype} products here")
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY")  # the suite's pin
    gen = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(40, 70).eval()
    with torch.no_grad():
        linear.weight.copy_(torch.randint(-40, 41, (70, 40), generator=gen))
        linear.bias.copy_(torch.randint(-9, 10, (70,), generator=gen))
    linear = linear.to(dtype)
    x = torch.randint(-40, 41, (6, 40), generator=gen).to(dtype)
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


def _linear_timed_as_matmul(monkeypatch) -> tuple[list, object, torch.fx.Node]:
    """An 8x512 @ [768, 512] product whose timing (faked) finds MAX's matmul
    fastest: the timings asked for, its lowering and its node."""
    register_families()
    timed: list = []

    def fake_timing(rows, k, n, weight_nk, forms, streamed=False, dtype=None):
        timed.append((rows, k, n, weight_nk, tuple(forms)))
        assert dtype == torch.float32
        return {form: (1.0 if form == "matmul" else 9.0) for form in forms}

    from torch_max_backend.kernels import product_timing

    monkeypatch.setattr(product_timing, "time_forms", fake_timing)
    gm = make_fx(F.linear, tracing_mode="fake")(
        torch.zeros(8, 512), torch.zeros(768, 512)
    )
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    return timed, MAPPING_TORCH_ATEN_TO_MAX[node.target], node


@pytest.mark.measured_products
def test_a_measured_choice_is_timed_once_and_reread(monkeypatch, choice_table):
    timed, lower, node = _linear_timed_as_matmul(monkeypatch)
    assert strategy_for(lower, node) == "matmul"  # the rule would say skinny
    assert strategy_for(lower, node) == "matmul"
    assert len(timed) == 1 and timed[0][:4] == (8, 512, 768, True)
    # A second process reads the table from disk and times nothing.
    path = product_choice.choices_here().path
    monkeypatch.setattr(product_choice, "_table", None)
    assert strategy_for(lower, node) == "matmul"
    assert len(timed) == 1
    saved = json.loads(path.read_text())
    (key,) = saved["choices"]
    assert saved["choices"][key]["choice"] == "matmul"
    assert saved["machine"] == product_choice.choices_here().identity
    # Another machine's table is another file: nothing is reused.
    other = product_choices.ProductChoices("another CPU; 2 cores; mkl")
    assert other.path != path and other.get(key) is None


@pytest.mark.measured_products
def test_choices_timed_under_an_older_rule_are_timed_again(
    monkeypatch, choice_table, caplog
):
    """Version 1's tables were timed while MAX's polling thread preempted the
    forms' tasks: their choices are not reused, and not warned about."""
    timed, lower, node = _linear_timed_as_matmul(monkeypatch)
    assert strategy_for(lower, node) == "matmul"
    path = product_choice.choices_here().path
    saved = json.loads(path.read_text())
    assert saved["version"] == product_choices.FORMAT_VERSION == 2
    (key,) = saved["choices"]
    # The same table written by version 1, its entry chosen otherwise.
    earlier = {"choice": "skinny", "us": {"matmul": 9.0, "skinny": 1.0}}
    path.write_text(json.dumps({**saved, "version": 1, "choices": {key: earlier}}))
    monkeypatch.setattr(product_choice, "_table", None)
    with caplog.at_level("INFO", logger="torch_max_backend"):
        assert strategy_for(lower, node) == "matmul"
    assert len(timed) == 2, "timed again"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    said = [r for r in caplog.records if "older rule" in r.getMessage()]
    assert len(said) == 1, "said once, not again when the table is rewritten"
    saved = json.loads(path.read_text())
    assert saved["version"] == 2 and saved["choices"][key]["choice"] == "matmul"
    # At this version the same entry is read as it is, without timing.
    path.write_text(json.dumps({**saved, "choices": {key: earlier}}))
    monkeypatch.setattr(product_choice, "_table", None)
    assert strategy_for(lower, node) == "skinny"
    assert len(timed) == 2


@needs_vendor_bfloat16
@pytest.mark.measured_products
def test_a_bfloat16_product_is_timed_in_bfloat16(monkeypatch, choice_table):
    register_families()
    timed = []

    def fake_timing(rows, k, n, weight_nk, forms, streamed=False, dtype=None):
        timed.append((rows, k, n, weight_nk, tuple(forms), dtype))
        return {form: (1.0 if form == "vendor" else 9.0) for form in forms}

    from torch_max_backend.kernels import product_timing

    monkeypatch.setattr(product_timing, "time_forms", fake_timing)
    gm = make_fx(F.linear, tracing_mode="fake")(
        torch.zeros(64, 512, dtype=torch.bfloat16),
        torch.zeros(768, 512, dtype=torch.bfloat16),
    )
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    assert strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node) == "vendor"
    assert timed == [(64, 512, 768, True, ("matmul", "vendor"), torch.bfloat16)]
    (key,) = json.loads(product_choice.choices_here().path.read_text())["choices"]
    assert "bfloat16" in key
    # The float32 product of the same sizes is another entry, timed apart.
    as_float32 = product_choice.ProductShape(64, 512, 768, weight_nk=True)
    assert as_float32.key(["matmul", "vendor"]) != key


@pytest.mark.measured_products
def test_small_products_keep_the_rules_without_timing(monkeypatch, choice_table):
    register_families()
    from torch_max_backend.kernels import product_timing

    monkeypatch.setattr(
        product_timing, "time_forms", lambda *a: pytest.fail("timed a small product")
    )
    gm = make_fx(F.linear, tracing_mode="fake")(
        torch.zeros(1, 256), torch.zeros(512, 256)
    )
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    assert strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node) == "row_sums"


def _small_linear_timed(monkeypatch, fastest: str) -> tuple[list, str]:
    """A 64x1024 @ [10, 1024] product (a classifier head: more work than the
    rules keep, less than a summed product's limit) timed by a faked timing
    that finds ``fastest`` fastest: the timings asked for, the strategy."""
    register_families()
    timed: list = []

    def fake_timing(rows, k, n, weight_nk, forms, streamed=False, dtype=None):
        timed.append(tuple(forms))
        return {form: (1.0 if form == fastest else 9.0) for form in forms}

    from torch_max_backend.kernels import product_timing

    monkeypatch.setattr(product_timing, "time_forms", fake_timing)
    gm = make_fx(F.linear, tracing_mode="fake")(
        torch.zeros(64, 1024), torch.zeros(10, 1024)
    )
    (node,) = [n for n in gm.graph.nodes if n.target is aten.mm.default]
    return timed, strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node)


@needs_vendor
@pytest.mark.measured_products
@pytest.mark.parametrize("fastest", ["vendor", "summed", "matmul"])
def test_a_small_product_is_timed_against_the_sum_it_would_be(
    monkeypatch, choice_table, fastest
):
    """Below SUMMED_PRODUCT_LIMIT a graph builds "matmul" as a sum, or as
    MAX's matmul where it holds one anyway; the vendor form alone had nothing
    to be timed against and "matmul" was taken untimed (a classifier head
    in bfloat16: 0.57 ms summed, 0.13 by the vendor kernel). It is taken
    only where it beats both."""
    timed, chosen = _small_linear_timed(monkeypatch, fastest)
    assert timed == [("vendor", "summed", "matmul")]
    assert chosen == ("vendor" if fastest == "vendor" else "matmul")


@needs_vendor
@pytest.mark.measured_products
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_real_timing_of_a_sum_agrees_with_the_vendor_form(choice_table, dtype):
    from torch_max_backend.kernels import product_timing

    if dtype_name(dtype) not in ("float32", *vendor_blas.vendor_blas().half_types):
        pytest.skip(f"no vendor {dtype} product here")
    # time_forms checks every form's result against the first form's.
    times = product_timing.time_forms(
        24, 256, 40, True, ["vendor", "summed"], dtype=dtype
    )
    assert set(times) == {"vendor", "summed"} and all(t > 0 for t in times.values())


@needs_vendor
@pytest.mark.measured_products
def test_real_timing_checks_each_form_and_keeps_the_fastest(choice_table):
    shape = product_choice.ProductShape(rows=4, k=256, n=2304, weight_nk=True)
    best = product_choice.measured(shape, ["skinny", "matmul", "vendor"])
    assert best in ("skinny", "matmul", "vendor")
    entry = product_choice.choices_here().get(shape.key(["skinny", "matmul", "vendor"]))
    assert entry["choice"] == best
    assert set(entry["us"]) == {"skinny", "matmul", "vendor"}
    assert all(t > 0 for t in entry["us"].values())


@needs_vendor
@pytest.mark.measured_products
def test_real_timing_runs_inside_a_fake_mode(choice_table):
    """Choices are asked for inside AOTAutograd's fake mode (the graph's
    fingerprint, capability checks): the timing still runs real tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    shape = product_choice.ProductShape(rows=4, k=256, n=2304, weight_nk=True)
    with FakeTensorMode():
        best = product_choice.measured(shape, ["skinny", "matmul", "vendor"])
    assert best in ("skinny", "matmul", "vendor")


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
