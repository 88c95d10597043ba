"""Matrix products and distances: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds, that a
decode step's one-row products take the row-sum strategy and match eager,
and that cdist's gradient matches eager's for every kind of norm.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import explain, max_backend
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import (
    MAPPING_TORCH_ATEN_TO_MAX,
    strategy_for,
    unsupported_reason,
)

from .family_check import check_family
from .helpers import check_against_eager

aten = torch.ops.aten


def test_linalg_lowerings_build_for_every_opinfo_case():
    # row_products: the sibling-products pass makes it; its own tests are in
    # tests/lower/test_sibling_products.py.
    check_family(
        "linalg",
        ("aten._cdist_backward.default", "torch_max_backend.row_products.default"),
    )


CDIST_NORMS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf"))


def _cdist_grads(grad: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> list:
    grads = []
    for p in CDIST_NORMS:
        dist = aten._cdist_forward(x1, x2, p, None)
        grads.append(aten._cdist_backward(grad, x1, x2, p, dist))
    return grads


def test_cdist_gradients_match_eager(max_calls):
    torch.manual_seed(0)
    x1, x2 = torch.randn(2, 5, 3), torch.randn(2, 4, 3)
    # A row of x1 in x2 (a distance of 0) and a shared coordinate (a
    # difference of 0, whose power below 1 is infinite): torch gives 0 there.
    x2[0, 1] = x1[0, 2]
    x2[1, 0, 1] = x1[1, 3, 1]
    grad = torch.randn(2, 5, 4)
    compiled = torch.compile(
        _cdist_grads, backend=max_backend, options={"strict": True}
    )
    got, want = compiled(grad, x1, x2), _cdist_grads(grad, x1, x2)
    for p, a, e in zip(CDIST_NORMS, got, want, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-4, msg=f"p={p}")
    assert max_calls.of("inference") == 1


def _product_node(fn, *inputs: torch.Tensor) -> torch.fx.Node:
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    products = [aten.mm.default, aten.addmm.default]
    (node,) = [n for n in gm.graph.nodes if n.target in products]
    return node


# (id, expected strategy, function, inputs): a decode step's Linear (one row
# against a weight stored [N, K]) takes row sums; up to 8 float32 rows against
# a weight of 2^15 elements or more, in either layout, the skinny kernel;
# the rest, MAX's matmul.
STRATEGY_CASES = [
    ("linear-one-row", "row_sums", F.linear, (torch.zeros(1, 64), torch.zeros(96, 64))),
    ("linear-bias-one-row", "row_sums", F.linear,
     (torch.zeros(1, 64), torch.zeros(96, 64), torch.zeros(96))),
    ("linear-two-rows", "matmul", F.linear, (torch.zeros(2, 64), torch.zeros(96, 64))),
    ("weight-stored-kn", "matmul", torch.mm, (torch.zeros(1, 64), torch.zeros(64, 96))),
    ("bfloat16", "matmul", F.linear,
     (torch.zeros(1, 64, dtype=torch.bfloat16), torch.zeros(96, 64, dtype=torch.bfloat16))),
    ("conv1d-one-row", "skinny", torch.addmm,
     (torch.zeros(768), torch.zeros(1, 512), torch.zeros(512, 768))),
    ("linear-eight-rows", "skinny", F.linear, (torch.zeros(8, 512), torch.zeros(768, 512))),
    ("linear-eight-rows-kv-projection", "skinny", F.linear,
     (torch.zeros(8, 512), torch.zeros(256, 512))),
    ("linear-eight-rows-cached-weight", "matmul", F.linear,
     (torch.zeros(8, 128), torch.zeros(128, 128))),
    ("linear-nine-rows", "matmul", F.linear, (torch.zeros(9, 512), torch.zeros(768, 512))),
    ("no-rows", "matmul", torch.mm, (torch.zeros(0, 512), torch.zeros(512, 768))),
    ("small-weight-kn", "matmul", torch.mm, (torch.zeros(2, 64), torch.zeros(64, 96))),
    ("bfloat16-large", "matmul", F.linear,
     (torch.zeros(8, 512, dtype=torch.bfloat16), torch.zeros(768, 512, dtype=torch.bfloat16))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("expected", "fn", "inputs"),
    [case[1:] for case in STRATEGY_CASES],
    ids=[case[0] for case in STRATEGY_CASES],
)
def test_one_row_products_read_stored_rows(expected, fn, inputs):
    register_families()
    node = _product_node(fn, *inputs)
    lower = MAPPING_TORCH_ATEN_TO_MAX[node.target]
    assert unsupported_reason(lower, node) is None
    assert strategy_for(lower, node) == expected


def test_row_sums_match_eager(max_calls):
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 300), torch.randn(500, 300), torch.randn(500)

    def linears(x, w, b):
        # A tied weight read twice, with and without a bias, scaled as addmm
        # allows; then a two-row product through MAX's matmul.
        one = F.linear(x, w) + torch.addmm(b, x, w.t(), beta=0.5, alpha=2.0)
        return one, F.linear(torch.cat([x, 2 * x]), w, b)

    compiled = torch.compile(
        linears, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    got, want = compiled(x, w, b), linears(x, w, b)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert max_calls.of("inference") == 1


def test_skinny_kernel_matches_eager(max_calls):
    torch.manual_seed(0)
    # Sizes with no multiple of the vector width, so every tail path runs:
    # weights of 2^15 elements or more, stored [K, N] (Conv1D) and [N, K].
    w_kn, w_nk = torch.randn(520, 509), torch.randn(509, 520)
    x, b = torch.randn(8, 520), torch.randn(509)

    def products(x, w_kn, w_nk, b):
        return (
            torch.mm(x[:1], w_kn),
            torch.addmm(b, x[:3], w_kn, beta=0.5, alpha=2.0),
            F.linear(x[:5], w_nk, b),
            F.linear(x, w_nk),
            # Operands that are views, not stored weights: every other column
            # of a [K, 2N] tensor, and a transposed slice.
            torch.mm(x[:2], torch.cat([w_kn, w_kn], 1)[:, ::2]),
            torch.mm(x[:2], w_nk[:, :].t()[:, 1:]),
        )

    compiled = torch.compile(
        products, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    got, want = compiled(x, w_kn, w_nk, b), products(x, w_kn, w_nk, b)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert max_calls.of("inference") == 1


def test_products_over_an_empty_inner_dimension_match_eager(max_calls):
    # MAX's matmul with nothing to contract leaves its output unwritten
    # (garbage from memory) and drops an epilogue fused into it (addmm's and
    # linear's bias): eager gives zeros, plus the bias.
    x, w, b = torch.randn(2, 0), torch.randn(3, 0), torch.randn(3)
    batch = torch.randn(4, 2, 0)

    def products(x, w, b, batch):
        return (
            torch.mm(x, w.t()),
            torch.addmm(b, x, w.t(), beta=2.0, alpha=3.0),
            F.linear(x, w, b),
            torch.bmm(batch, batch.transpose(1, 2)),
            x @ w.t() + 1,
        )

    compiled = torch.compile(
        products, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    got, want = compiled(x, w, b, batch), products(x, w, b, batch)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
    assert max_calls.of("inference") == 1


def test_a_symbolic_batch_first_seen_at_eight_rows_or_fewer_takes_the_skinny_kernel(
    max_calls, graph_texts
):
    # A decode step generated at a second batch size reaches the backend with
    # a symbolic batch (Dynamo's automatic dynamic shapes). Its rows are
    # counted at run time: blocks of 8, then the rest, so more than 8 rows
    # (a later, larger batch) are right too.
    torch.manual_seed(0)
    w_kn, w_nk, b = torch.randn(260, 130), torch.randn(130, 260), torch.randn(130)

    def products(x, w_kn, w_nk, b):
        return torch.mm(x, w_kn), F.linear(x, w_nk, b)

    compiled = torch.compile(products, backend=max_backend, options={"strict": True})
    for rows in (2, 5, 19, 8, 1):
        x = torch.randn(rows, 260)
        got, want = compiled(x, w_kn, w_nk, b), products(x, w_kn, w_nk, b)
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    # Built: 2 rows (static), 5 (symbolic, also run at 19 and 8), 1 (static).
    static_two, symbolic, _ = graph_texts()
    assert "rows = 2 : index" in static_two
    assert "rows = 0 : index" in symbolic, "the symbolic graph did not count rows"
    assert symbolic.count("torch_max_backend_skinny_matmul") == 2
    assert "mo.matmul" not in symbolic
    assert max_calls.of("inference") == 5


def _bilinear_products(x1, x2, weight, bias):
    return (
        F.bilinear(x1, x2, weight, bias),
        F.bilinear(x1[0], x2[0], weight),
        # The weight's output dim summed too.
        aten._trilinear(x1[0], weight, x2[0], [1, 3], [0], [1, 2], [1, 2, 3]),
    )


def test_bilinear_layers_match_eager_and_train_on_max():
    torch.manual_seed(0)
    x1, x2 = torch.randn(2, 3, 5), torch.randn(2, 3, 4)
    weight, bias = torch.randn(6, 5, 4), torch.randn(6)
    check_against_eager(_bilinear_products, x1, x2, weight, bias, rtol=1e-4, atol=1e-5)
    layer = torch.nn.Bilinear(5, 4, 6)
    report = explain(lambda a, b: layer(a, b).sum(), x1, x2, training=True)
    assert report.unsupported == {}
