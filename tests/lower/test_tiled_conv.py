"""Our register-tiled convolution kernel (kernels/mojo_conv) against eager:
strides, dilation, padding, a bias, 1-d, channel counts off every tile, a
batch counted at run time, gradients through it, and where it is not taken."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import explain, max_backend
from torch_max_backend.lower import conv_choice, conv_kernel
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for

aten = torch.ops.aten
KERNEL = conv_kernel.KERNEL


@pytest.fixture(autouse=True)
def tiled_convolutions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every convolution the kernel fits takes it, on any CPU (the suite's
    rule gives it MAX's conv2d on one with AVX-512)."""
    monkeypatch.setenv("TORCH_MAX_BACKEND_CONV_STRATEGY", "tiled")
    conv_choice.set_conv_strategy("tiled")


def _convolutions(
    x: torch.Tensor, wide: torch.Tensor, line: torch.Tensor, *weights: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Outputs over 16x16 pixels (smaller ones go through im2col): 20 and 8
    output channels (part of a panel of 16 or 64), 198-pixel rows (off the
    6-pixel tiles), strides, dilation, a 7x7 filter over 3 channels."""
    w3, b3, w3s, w1, wd, w7, w1d = weights
    return (
        F.conv2d(x, w3, b3, padding=1),
        F.conv2d(wide, w3s, stride=2, padding=1),
        F.conv2d(wide, w1, stride=2),
        F.conv2d(x, wd, padding=2, dilation=2),
        F.conv2d(wide[:, :3], w7, stride=2, padding=3),
        F.conv1d(line, w1d, padding=2),
    )


def _inputs(batch: int = 2) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return (
        torch.randn(batch, 5, 18, 19),
        torch.randn(batch, 16, 36, 35),
        torch.randn(batch, 4, 300),
        torch.randn(20, 5, 3, 3),
        torch.randn(20),
        torch.randn(32, 16, 3, 3),
        torch.randn(8, 16, 1, 1),
        torch.randn(16, 5, 3, 3),
        torch.randn(16, 3, 7, 7),
        torch.randn(12, 4, 5),
    )


def test_the_tiled_kernel_matches_eager(max_calls, graph_texts):
    inputs = _inputs()
    compiled = torch.compile(_convolutions, backend=max_backend)
    for got, want in zip(compiled(*inputs), _convolutions(*inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    assert max_calls.count == 1
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == 6
    assert "rmo.conv" not in text and "im2col" not in text
    report = explain(_convolutions, *inputs)
    strategies = [op.strategies for op in report.graphs[0].ops if op.strategies]
    assert strategies == [{"tiled": 6}]


def test_the_tiled_kernel_counts_a_symbolic_batch_at_run_time(max_calls, graph_texts):
    compiled = torch.compile(_convolutions, backend=max_backend)
    for batch in (3, 5):
        inputs = _inputs(batch)
        for x in inputs[:3]:
            torch._dynamo.mark_dynamic(x, 0)
        got = compiled(*inputs)
        for g, want in zip(got, _convolutions(*inputs), strict=True):
            torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-4)
    assert max_calls.count == 2
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == 6


def test_gradients_through_the_tiled_kernel_match_eager(graph_texts):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3)
    )
    twin = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3)
    )
    twin.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 20, 20)
    torch.compile(model, backend=max_backend)(x).square().sum().backward()
    twin(x).square().sum().backward()
    for got, want in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)
    forward = graph_texts()[0]
    assert forward.count(f'"{KERNEL}"') == 2


def _conv_node(fn, *args: torch.Tensor) -> torch.fx.Node:
    register_families()
    gm = make_fx(fn, tracing_mode="fake")(*args)
    (node,) = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    return node


def _strategy(fn, *args: torch.Tensor) -> str | None:
    node = _conv_node(fn, *args)
    return strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node)


def test_where_the_tiled_kernel_is_not_taken(monkeypatch):
    conv_choice.set_conv_strategy("rule")
    monkeypatch.setattr(conv_choice, "cpu_has_avx512", lambda: False)
    x, w = torch.zeros(1, 4, 20, 20), torch.zeros(8, 4, 3, 3)
    assert _strategy(F.conv2d, x, w) == "tiled"
    # Other dtypes, grouped filters and small outputs go elsewhere.
    assert _strategy(F.conv2d, x.double(), w.double()) == "direct"
    grouped = torch.zeros(8, 2, 3, 3)
    assert _strategy(lambda a, b: F.conv2d(a, b, groups=2), x, grouped) == "direct"
    assert _strategy(F.conv2d, x[..., :10, :10], w) == "im2col_matmul"
    node = _conv_node(F.conv2d, x.double(), w.double())
    assert (
        conv_kernel.tiled_conv_fits(node) == "torch.float64 (the kernel takes float32)"
    )
    # By the rule, a CPU with AVX-512 keeps MAX's conv2d.
    monkeypatch.setattr(conv_choice, "cpu_has_avx512", lambda: True)
    assert _strategy(F.conv2d, x, w) == "direct"
