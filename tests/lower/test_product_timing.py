"""Products' strategies chosen by timing each form once per machine and
shape: the choice cached and reread, timed again under a newer rule, small
products against the sums they would be, and real timings of each form."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from vendor_marks import needs_vendor, needs_vendor_bfloat16

from torch_max_backend.dtypes import dtype_name
from torch_max_backend.kernels import pair_dot, vendor_blas
from torch_max_backend.lower import product_choice
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for
from torch_max_backend.storage import product_choices

aten = torch.ops.aten


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
    # The paired kernel's form is timed only on AVX512-BF16 CPUs
    # (test_paired_products.py): left out here on every machine.
    monkeypatch.setattr(pair_dot, "has_pair_dot", lambda: False)
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
