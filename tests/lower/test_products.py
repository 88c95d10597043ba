"""Small products are built as sums of broadcast products on the CPU, in a
graph where no product needs MAX's matmul kernel (about 50 s of compile a
graph); a graph with one large product builds all of them as matmuls."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend.lower.builder import build_graph, graph_fingerprint
from torch_max_backend.lower.products import (
    MATMUL_FASTER_FROM,
    MATMUL_FASTER_ROWS,
    SUMMED_PRODUCT_LIMIT,
)
from torch_max_backend.pipeline.graph_builds import GraphBuilds
from torch_max_backend.settings import Settings

from .ops.helpers import check_against_eager


def _forms(fn, *inputs: torch.Tensor, tracing_mode: str = "real") -> tuple[int, int]:
    """(matmuls, sum reductions) in the MAX graph built from ``fn``."""
    text = str(build_graph(make_fx(fn, tracing_mode=tracing_mode)(*inputs)).graph)
    return text.count("rmo.matmul"), text.count("mo.reduce.add")


def _z(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(*shape, dtype=dtype)


def _big_k() -> int:
    # A [64, K] x [K, 64] product one multiply-add past the limit.
    return SUMMED_PRODUCT_LIMIT // (64 * 64) + 1


# (id, function, inputs, matmuls, sums)
FORM_CASES = [
    ("linear", F.linear, (_z(32, 64), _z(64, 64)), 0, 1),
    ("linear-bias", F.linear, (_z(32, 64), _z(96, 64), _z(96)), 0, 1),
    ("bmm", torch.bmm, (_z(8, 16, 16), _z(8, 16, 16)), 0, 1),
    ("bf16", torch.mm, (_z(4, 8, dtype=torch.bfloat16), _z(8, 4, dtype=torch.bfloat16)), 0, 1),
    ("at-limit", torch.mm, (_z(64, _big_k() - 1), _z(_big_k() - 1, 64)), 0, 1),
    ("past-limit", torch.mm, (_z(64, _big_k()), _z(_big_k(), 64)), 1, 0),
    # One product needs the matmul kernel: the small one is a matmul too.
    ("mixed", lambda x, w, a, b: (x @ w, a @ b),
     (_z(64, _big_k()), _z(_big_k(), 64), _z(4, 4), _z(4, 4)), 2, 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fn", "inputs", "matmuls", "sums"),
    [case[1:] for case in FORM_CASES],
    ids=[case[0] for case in FORM_CASES],
)
def test_each_graph_builds_its_products_in_one_form(fn, inputs, matmuls, sums):
    assert _forms(fn, *inputs) == (matmuls, sums)


@pytest.mark.parametrize("bias", [False, True])
def test_a_summed_linear_reads_its_weights_rows_where_they_lie(bias):
    """A Linear's weight is stored [N, K]; summed over K of its transposed
    view, [M, K, N], MAX reduced a non-inner axis: a 64x1024x10 classifier
    head took 291 us so against 88 along the stored rows, [M, N, K]
    (docs/benchmarks.md)."""
    inputs = (_z(32, 64), _z(96, 64), *([_z(96)] if bias else []))
    text = str(build_graph(make_fx(F.linear)(*inputs)).graph)
    assert text.count("mo.reduce.add") == 1
    assert "[32, 96, 64]" in text and "[32, 64, 96]" not in text


def test_symbolic_sizes_keep_the_matmul():
    # A size known only at run time could be any size.
    forms = _forms(torch.mm, _z(5, 8), _z(8, 3), tracing_mode="symbolic")
    assert forms == (1, 0)


def test_summed_products_match_eager(max_calls):
    torch.manual_seed(0)
    x, w, b = torch.randn(6, 40), torch.randn(24, 40), torch.randn(24)
    p, q = torch.randn(3, 5, 7), torch.randn(3, 7, 4)
    h, g = x.bfloat16(), w.bfloat16()
    i, j = torch.randint(-9, 9, (4, 6)), torch.randint(-9, 9, (6, 3))

    def fn(x, w, b, p, q, h, g, i, j):
        return (
            F.linear(x, w, b),
            torch.addmm(b, x, w.t(), beta=0.5, alpha=2.0),
            torch.bmm(p, q),
            p @ q[0],  # batch broadcast
            F.linear(h, g),
            i @ j,
            x[:, :0] @ w[:, :0].t(),  # nothing to contract: zeros
            # Empty results (MAX failed to compile them summed), and the
            # pooling tables' product over an empty batch.
            x[:0] @ w.t(),
            torch.bmm(p[:0], q[:0]),
            F.adaptive_avg_pool1d(p[:0], 3),
        )

    check_against_eager(fn, x, w, b, p, q, h, g, i, j, rtol=1e-4, atol=1e-4)
    assert max_calls.count == 1


def test_products_as_matmuls_when_asked_and_fingerprinted_apart():
    gm = make_fx(F.linear)(_z(32, 64), _z(64, 64))
    text = str(build_graph(gm, summed_products=False).graph)
    assert text.count("rmo.matmul") == 1 and "mo.reduce.add" not in text
    # A warm start must not load the graph built the other way.
    assert graph_fingerprint(gm) != graph_fingerprint(gm, summed_products=False)


def test_compile_options_reach_the_build(monkeypatch):
    # What torch.compile's options and mode set is what GraphBuilds builds.
    monkeypatch.delenv("TORCH_MAX_BACKEND_SUMMED_PRODUCTS", raising=False)
    gm = make_fx(F.linear)(_z(32, 64), _z(64, 64))
    for mode, matmuls in ((None, 0), ("max-autotune", 1)):
        settings = Settings.resolve(None, mode)
        built = GraphBuilds(gm, None, settings.summed_products).build(gm)
        assert str(built.graph).count("rmo.matmul") == matmuls


def _largest_upgradable_sum(fn, *inputs: torch.Tensor) -> int:
    return build_graph(make_fx(fn)(*inputs)).largest_upgradable_sum


def test_only_sums_of_many_rows_call_for_the_matmul_upgrade():
    # A decode step's attention at batch 8: one query row a head (or a group
    # of two), 8 x 8 x 65 x 64 multiply-adds, past MATMUL_FASTER_FROM. Summed,
    # it ran as fast as on MAX's matmul, so its graph is not upgraded.
    q, k, v = _z(8, 8, 1, 64), _z(8, 8, 65, 64), _z(8, 8, 65, 64)
    assert MATMUL_FASTER_FROM <= 8 * 8 * 65 * 64 <= SUMMED_PRODUCT_LIMIT
    assert _largest_upgradable_sum(F.scaled_dot_product_attention, q, k, v) == 0
    grouped = _z(8, 4, 65, 64)
    gqa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
    assert _largest_upgradable_sum(gqa, q, grouped, grouped) == 0
    weights = _z(32, 64, 65)
    few = _z(32, MATMUL_FASTER_ROWS - 1, 64)
    assert _forms(torch.bmm, few, weights) == (0, 1)  # summed, but not counted
    assert _largest_upgradable_sum(torch.bmm, few, weights) == 0
    # As many rows as the threshold: the T5-like products it was made for.
    many = _z(32, MATMUL_FASTER_ROWS, 64)
    assert (
        _largest_upgradable_sum(torch.bmm, many, weights)
        == 32 * MATMUL_FASTER_ROWS * 64 * 65
    )
    assert _largest_upgradable_sum(F.linear, _z(32, 64), _z(64, 64)) == 32 * 64 * 64
