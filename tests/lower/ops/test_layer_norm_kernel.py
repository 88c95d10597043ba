"""Layer norm as MAX's one LayerNorm kernel where nothing reads its statistics.

A composed layer norm (mean, variance, normalize) is three MAX kernels, and
MAX's compile time follows the kernel count: 25 chained composed layer norms
compiled in 173 s against 41 s for the same chain of LayerNorm ops (AMD EPYC,
2 cores). Inference graphs never read the mean and rstd outputs; training
graphs save them for the backward, and take a kernel of ours on the CPU
(tests/lower/ops/test_normalization.py) or the composed form.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import max_backend
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for

aten = torch.ops.aten


def _all_outputs(x, w, b):
    return aten.native_layer_norm(x, [16], w, b, 1e-5)


def _output_only(x, w, b):
    return aten.native_layer_norm(x, [16], w, b, 1e-5)[0]


def _no_epsilon(x, w, b):
    return aten.native_layer_norm(x, [16], w, b, 0.0)[0]


@pytest.mark.parametrize(
    ("fn", "dtype", "expected"),
    [
        (_output_only, torch.float32, "layer_norm_kernel"),
        (_output_only, torch.bfloat16, "layer_norm_kernel"),
        (_all_outputs, torch.float32, "statistics_kernel"),
        (_all_outputs, torch.bfloat16, "statistics_kernel"),
        (_all_outputs, torch.float64, "composed"),
        (_no_epsilon, torch.float32, "statistics_kernel"),
        (_output_only, torch.float64, "composed"),
    ],
    ids=[
        "statistics-unused",
        "bfloat16",
        "statistics-read",
        "statistics-read-bfloat16",
        "statistics-read-float64",
        "zero-epsilon",
        "float64",
    ],
)
def test_layer_norm_kernel_where_statistics_are_unused(fn, dtype, expected):
    register_families()
    gm = make_fx(fn, tracing_mode="fake")(
        *(torch.zeros(*shape, dtype=dtype) for shape in ((2, 16), (16,), (16,)))
    )
    (node,) = [n for n in gm.graph.nodes if n.target == aten.native_layer_norm.default]
    assert strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node) == expected


def test_layer_norms_run_as_one_kernel_each_and_match_eager(max_calls, graph_texts):
    torch.manual_seed(0)

    def norms(x, img, w, b, w2, b2):
        return (
            F.layer_norm(x, (16,), w, b, eps=1e-6),
            # No weight and bias; several normalized dims at once.
            F.layer_norm(img, (3, 4)),
            F.layer_norm(img, (3, 4), w2, b2),
            # A residual stream, as in a transformer block.
            F.layer_norm(x + F.layer_norm(x, (16,), w, b), (16,), w, b),
        )

    x = torch.randn(2, 5, 16) * 3 + 1
    # Rows holding NaN and infinities give NaN rows, as eager's.
    x[0, 1, 3] = float("nan")
    x[1, 2, 0] = float("inf")
    x[1, 3, :] = float("-inf")
    img = torch.randn(2, 6, 3, 4)
    w, b = torch.randn(16), torch.randn(16)
    w2, b2 = torch.randn(3, 4), torch.randn(3, 4)
    compiled = torch.compile(
        norms, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    with torch.no_grad():
        got, want = compiled(x, img, w, b, w2, b2), norms(x, img, w, b, w2, b2)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert max_calls.of("inference") == 1
    (text,) = graph_texts()
    assert text.count("layer_norm") == 5
    assert "reduce.mean" not in text


def test_training_keeps_the_statistics_for_the_backward(max_calls):
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(16)
    x = torch.randn(4, 16, requires_grad=True)
    compiled = torch.compile(
        norm, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    compiled(x).pow(2).sum().backward()
    got = (x.grad.clone(), norm.weight.grad.clone())
    x.grad, norm.weight.grad, norm.bias.grad = None, None, None
    norm(x).pow(2).sum().backward()
    for g, e in zip(got, (x.grad, norm.weight.grad), strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert max_calls.of("forward") == 1
    assert max_calls.of("backward") == 1
