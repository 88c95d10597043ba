"""Products of one input by several Linear weights at a few rows (a decode
step's q, k and v; gate and up) become one ``row_products`` node, lowered as
one kernel of ours, where each would have been one of our streaming forms."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import explain, max_backend
from torch_max_backend.lower import product_choice
from torch_max_backend.lower.ops.linalg import _row_products_fit
from torch_max_backend.lower.passes.sibling_products import with_sibling_products
from torch_max_backend.lower.row_products import ROW_PRODUCTS

from .aten_graphs import aten_graphs

aten = torch.ops.aten
# A weight of 2^15 elements, the least the few-rows forms take.
K = 128


def _weights(*sizes: int) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(n, K) / K**0.5 for n in sizes]


def _layer(x: torch.Tensor, *w: torch.Tensor) -> torch.Tensor:
    # As a llama-style decode step: q, k, v from one row (k and v with a
    # bias, as Qwen's), then gate and up from the attention's result. The
    # weights in the order of their use, as the captured graph takes them.
    # k's mean, not its sum: a sum of 256 biased values (about 20) made the
    # down projection cancel terms of hundreds, whose float32 rounding (2e-4
    # on an AMD EPYC) passed the comparison's 1e-4 by the machine's luck.
    q, k, v = F.linear(x, w[0]), F.linear(x, w[1], w[2]), F.linear(x, w[3], w[4])
    h = x + q[:, :K] * k.mean(-1, keepdim=True) + v[:, :K]
    return F.linear(F.silu(F.linear(h, w[5])) * F.linear(h, w[6]), w[7])


def _layer_weights() -> list[torch.Tensor]:
    """q; k and its bias; v and its bias; gate and up [N, K]; down [K, 384]."""
    q, k, v, gate, up = _weights(256, 256, 512, 384, 384)
    down = torch.randn(K, 384) / 384**0.5
    return [q, k, torch.randn(256), v, torch.randn(512), gate, up, down]


def _count(gm: torch.fx.GraphModule, target: object) -> int:
    return sum(1 for n in gm.graph.nodes if n.target == target)


def test_siblings_become_one_node_that_pytorch_runs_as_before():
    x = torch.randn(1, K)
    (gm,) = aten_graphs(_layer, x, *_layer_weights())
    assert _count(gm, aten.mm.default) == 4
    assert _count(gm, aten.addmm.default) == 2
    rewritten = with_sibling_products(gm)
    # q, k and v one node (k's and v's biases added after), gate and up
    # another; the down projection alone.
    assert _count(rewritten, ROW_PRODUCTS) == 2
    assert _count(rewritten, aten.mm.default) == 1
    assert _count(rewritten, aten.addmm.default) == 0
    assert _count(gm, aten.mm.default) == 4  # the graph handed in is kept
    grouped = [
        len(n.args[1]) for n in rewritten.graph.nodes if n.target == ROW_PRODUCTS
    ]
    assert grouped == [3, 2]
    # Nothing more to find: the same graph comes back.
    assert with_sibling_products(rewritten) is rewritten
    args = (x, *_layer_weights())
    torch.testing.assert_close(rewritten(*args), gm(*args))


def _four_then_five(x: torch.Tensor, *w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x + 1
    return tuple(F.linear(x, wi) for wi in w[:4]) + tuple(
        F.linear(y, wi) for wi in w[4:]
    )


def test_groups_take_two_or_three_and_leave_none_alone():
    x = torch.randn(1, K)
    (gm,) = aten_graphs(_four_then_five, x, *_weights(*[256] * 9))
    rewritten = with_sibling_products(gm)
    sizes = [len(n.args[1]) for n in rewritten.graph.nodes if n.target == ROW_PRODUCTS]
    assert sorted(sizes) == [2, 2, 2, 3]
    assert _count(rewritten, aten.mm.default) == 0
    assert _count(rewritten, operator.getitem) == 9


def _two(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return F.linear(x, a), F.linear(x, b)


def _two_stored_kn(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple:
    return x @ a, x @ b


@pytest.mark.parametrize(
    "case",
    ["many rows", "small weights", "stored [K, N]", "half precision", "other strategy"],
)
def test_products_our_streaming_forms_would_not_build_stay_apart(
    case: str, monkeypatch: pytest.MonkeyPatch
):
    rows, n, fn, dtype = 1, 256, _two, torch.float32
    if case == "many rows":
        rows = 9
    elif case == "small weights":
        n = 64  # 8192 elements: cached, over within a kernel's fixed cost
    elif case == "stored [K, N]":
        fn = _two_stored_kn
    elif case == "half precision":
        dtype = torch.bfloat16
    weights = [w.to(dtype) for w in _weights(n, n)]
    if fn is _two_stored_kn:
        weights = [w.t().contiguous() for w in weights]
    (gm,) = aten_graphs(fn, torch.randn(rows, K, dtype=dtype), *weights)
    if case == "other strategy":
        # A product_strategy naming another form builds every product so.
        monkeypatch.setattr(product_choice, "_setting", "matmul")
    assert with_sibling_products(gm) is gm


def test_the_lowering_refuses_what_its_kernel_cannot_run():
    x = torch.randn(1, K)
    (gm,) = aten_graphs(_layer, x, *_layer_weights())
    node = next(
        n for n in with_sibling_products(gm).graph.nodes if n.target == ROW_PRODUCTS
    )
    assert _row_products_fit(node) is None
    four = node.args[1] + node.args[1][:1]
    node.args = (node.args[0], four)
    assert _row_products_fit(node) == "4 weights, not 2 or 3"


@pytest.mark.parametrize("rows", [1, 3])
def test_a_decode_layer_runs_its_siblings_as_one_kernel(
    rows: int, max_calls, built_graphs
):
    x = torch.randn(rows, K)
    weights = _layer_weights()
    with torch.no_grad():
        got = torch.compile(_layer, backend=max_backend, dynamic=False)(x, *weights)
    torch.testing.assert_close(got, _layer(x, *weights), rtol=1e-4, atol=1e-4)
    assert max_calls.count == 1
    assert str(ROW_PRODUCTS) in built_graphs.ops()
    (text,) = [str(built.graph) for _, built in built_graphs]
    assert text.count("torch_max_backend_three_row_products") == 1
    assert text.count("torch_max_backend_two_row_products") == 1
    if rows > 1:
        return
    # explain() shows the graph the backend builds, the node on MAX.
    report = str(explain(_layer, x, *weights))
    assert "torch_max_backend.row_products.default        2  MAX" in report


def test_the_op_runs_in_pytorch_as_linear_each():
    x = torch.randn(3, K)
    a, b = _weights(256, 128)
    got = torch.ops.torch_max_backend.row_products(x, [a, b])
    torch.testing.assert_close(got[0], F.linear(x, a))
    torch.testing.assert_close(got[1], F.linear(x, b))


def test_products_listed_in_torch_executed_ops_stay_in_pytorch(max_calls):
    x = torch.randn(1, K)
    weights = _layer_weights()
    compiled = torch.compile(
        _layer,
        backend=max_backend,
        dynamic=False,
        options={"torch_executed_ops": ["aten.mm"], "min_block_size": 1},
    )
    with torch.no_grad(), pytest.warns(UserWarning, match="row_products"):
        got = compiled(x, *weights)
    torch.testing.assert_close(got, _layer(x, *weights), rtol=1e-4, atol=1e-4)
    report = str(
        explain(_layer, x, *weights, options={"torch_executed_ops": ["aten.mm"]})
    )
    assert "torch_max_backend.row_products.default        2  PyTorch" in report
