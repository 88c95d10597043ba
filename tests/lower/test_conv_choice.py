"""Our tiled convolution kernel against MAX's conv2d, chosen by a timing once
per machine and shape (lower/conv_choice.py), by the rule, or by
``conv_strategy``."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import explain
from torch_max_backend.kernels import conv_timing
from torch_max_backend.lower import conv_choice, product_choice
from torch_max_backend.lower.builder.fingerprint import graph_fingerprint
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for

aten = torch.ops.aten
# A 3x3 convolution with a 20x20 output: both kernels fit (outputs of at most
# 16x16 pixels go through im2col).
IMAGE, FILTER = torch.zeros(2, 4, 20, 20), torch.zeros(8, 4, 3, 3)


def _conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w, padding=1)


def _node(conv=_conv, *inputs: torch.Tensor) -> torch.fx.Node:
    register_families()
    gm = make_fx(conv, tracing_mode="fake")(*(inputs or (IMAGE, FILTER)))
    (node,) = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    return node


def _strategy(node: torch.fx.Node) -> str | None:
    return strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node)


def _fake_timing(monkeypatch, winner: str) -> list[tuple]:
    timed: list[tuple] = []

    def fake(image, filter_size, stride, dilation, forms):
        timed.append((image, filter_size, stride, dilation, tuple(forms)))
        return {form: (1.0 if form == winner else 9.0) for form in forms}

    monkeypatch.setattr(conv_timing, "time_conv_forms", fake)
    return timed


@pytest.mark.measured_products
def test_a_measured_choice_is_timed_once_and_reread(monkeypatch, choice_table):
    timed = _fake_timing(monkeypatch, "direct")
    monkeypatch.setattr(conv_choice, "cpu_has_avx512", lambda: False)
    node = _node()
    assert _strategy(node) == "direct"  # the rule would take our kernel here
    assert _strategy(node) == "direct"
    # The padded channels-last image and the RSCF filter, as the kernels see them.
    assert timed == [((2, 22, 22, 4), (3, 3, 4, 8), (1, 1), (1, 1), conv_choice.TIMED)]
    # A second process reads the table from disk and times nothing.
    path = product_choice.choices_here().path
    monkeypatch.setattr(product_choice, "_table", None)
    assert _strategy(node) == "direct"
    assert len(timed) == 1
    (key,) = json.loads(path.read_text())["choices"]
    assert key == "conv 2x22x22x4 3x3x4x8 s1x1 d1x1 direct,tiled"
    # The other winner is taken as well: the timing decides, not the CPU.
    monkeypatch.setattr(product_choice, "_table", None)
    monkeypatch.setattr(conv_choice, "cpu_has_avx512", lambda: True)
    path.unlink()
    _fake_timing(monkeypatch, "tiled")
    assert _strategy(node) == "tiled"


@pytest.mark.measured_products
def test_a_failed_timing_leaves_the_rule(monkeypatch, choice_table):
    def broken(*args):
        raise RuntimeError("no timing here")

    monkeypatch.setattr(conv_timing, "time_conv_forms", broken)
    node = _node()
    for avx512, rule in ((False, "tiled"), (True, "direct")):
        monkeypatch.setattr(conv_choice, "cpu_has_avx512", lambda avx512=avx512: avx512)
        assert _strategy(node) == rule
    assert not product_choice.choices_here().path.exists()


@pytest.mark.measured_products
def test_what_only_one_kernel_fits_is_not_timed(monkeypatch, choice_table):
    monkeypatch.setattr(
        conv_timing, "time_conv_forms", lambda *a: pytest.fail("timed a convolution")
    )
    # A small output goes through im2col; float64 and grouped ones to MAX's conv2d.
    assert _strategy(_node(_conv, IMAGE[..., :8, :8], FILTER)) == "im2col_matmul"
    assert _strategy(_node(_conv, IMAGE.double(), FILTER.double())) == "direct"
    grouped = torch.zeros(8, 2, 3, 3)
    assert _strategy(_node(lambda x, w: F.conv2d(x, w, groups=2), IMAGE, grouped)) == (
        "direct"
    )


def test_a_one_d_convolution_is_timed_as_two_d_over_a_height_of_1():
    node = _node(
        lambda x, w: F.conv1d(x, w, stride=2, padding=3, dilation=2),
        torch.zeros(3, 5, 300),
        torch.zeros(7, 5, 4),
    )
    shape = conv_choice.conv_shape(node)
    assert shape == conv_choice.ConvShape((3, 1, 306, 5), (1, 4, 5, 7), (1, 2), (1, 2))


def test_conv_strategy_overrides_the_rule(monkeypatch):
    node = _node()
    monkeypatch.setattr(conv_choice, "cpu_has_avx512", lambda: True)
    conv_choice.set_conv_strategy("tiled")
    assert _strategy(node) == "tiled"
    monkeypatch.setattr(conv_choice, "cpu_has_avx512", lambda: False)
    conv_choice.set_conv_strategy("direct")
    assert _strategy(node) == "direct"
    # A strategy that does not fit leaves the rule: im2col takes small outputs.
    conv_choice.set_conv_strategy("im2col_matmul")
    assert _strategy(node) == "tiled"
    conv_choice.set_conv_strategy("rule")
    with pytest.raises(ValueError, match="unknown conv_strategy 'fast'"):
        conv_choice.set_conv_strategy("fast")


def test_the_chosen_kernel_is_part_of_the_fingerprint():
    register_families()
    gm = make_fx(_conv, tracing_mode="fake")(IMAGE, FILTER)
    conv_choice.set_conv_strategy("tiled")
    as_tiled = graph_fingerprint(gm)
    conv_choice.set_conv_strategy("direct")
    as_direct = graph_fingerprint(gm)
    conv_choice.set_conv_strategy("rule")
    assert as_tiled is not None and as_direct is not None
    assert as_tiled != as_direct


def test_explain_shows_the_forced_kernel(monkeypatch):
    monkeypatch.delenv("TORCH_MAX_BACKEND_CONV_STRATEGY")  # the suite's pin
    layer = torch.nn.Conv2d(4, 8, 3, padding=1).eval()
    for forced in ("direct", "tiled"):
        with torch.no_grad():
            report = explain(layer, IMAGE, options={"conv_strategy": forced})
        (op,) = [
            op for op in report.graphs[0].ops if op.op == "aten.convolution.default"
        ]
        assert op.strategies == {forced: 1}


def test_strides_1_and_2_share_one_timing_graph():
    shared = conv_timing._slots((2, 2), (1, 1))
    assert shared == conv_timing._slots((1, 1), (1, 1)) == conv_timing.SHARED
    assert {form for form, _, _ in shared} == set(conv_timing.FORMS)
    # Another stride or a dilation gets a graph of its own, both forms in it.
    assert conv_timing._slots((4, 4), (1, 1)) == (
        ("tiled", (4, 4), (1, 1)),
        ("direct", (4, 4), (1, 1)),
    )
    assert conv_timing._slots((1, 1), (2, 2)) == (
        ("tiled", (1, 1), (2, 2)),
        ("direct", (1, 1), (2, 2)),
    )


@pytest.mark.measured_products
def test_real_timing_checks_both_kernels_and_keeps_the_faster(choice_table):
    # Compiles the shared timing graph once per machine (MAX's cache keeps it).
    shape = conv_choice.ConvShape((1, 34, 34, 8), (3, 3, 8, 16), (2, 2), (1, 1))
    best = conv_choice.measured(shape, list(conv_choice.TIMED))
    assert best in conv_choice.TIMED
    entry = product_choice.choices_here().get(shape.key(conv_choice.TIMED))
    assert entry["choice"] == best
    assert set(entry["us"]) == set(conv_choice.TIMED)
    assert all(t > 0 for t in entry["us"].values())
