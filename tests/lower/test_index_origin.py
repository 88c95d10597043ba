"""Index ranges over static sizes start at a runtime zero (an input), so MAX
computes them and the index arithmetic built on them at every call (in
microseconds) instead of folding them at compile time (its ConstantFold pass
JIT-compiles kernels of their own, tens of seconds a graph)."""

from __future__ import annotations

import torch
from graph_text import foldable_ops

from torch_max_backend import max_backend
from torch_max_backend.lower.builder import build_graph
from torch_max_backend.lower.builder.planning import InputPlan
from torch_max_backend.lower.passes import analyzed, rewritten

from .aten_graphs import aten_graphs


def _index_arithmetic(
    x: torch.Tensor,
    index: torch.Tensor,
    image: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> torch.Tensor:
    # Each lowered over positions along a dim or static sizes: gather and
    # nll_loss, flip, var; their gradients slice_scatter (steps 1 and 2),
    # select_scatter (a negative index) and max pooling's indices; causal
    # attention with fewer queries than keys (torch aligns it top-left).
    loss = torch.nn.functional.cross_entropy(x, index[:, 0])
    loss = loss + x.gather(1, index).sum() + x.flip(1)[:, :3].sum()
    loss = loss + (x[:, 1:5] * 2).sum() + x[:, ::2].sum() + x[:, -1].sum()
    loss = loss + x.var(1).sum() + torch.nn.functional.max_pool2d(image, 2).sum()
    attention = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )
    return loss + (attention * attention).sum()


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [
        torch.randn(6, 8, requires_grad=True),
        torch.randint(0, 8, (6, 2)),
        torch.randn(1, 2, 6, 6, requires_grad=True),
        torch.randn(1, 4, 3, 8, requires_grad=True),
        torch.randn(1, 2, 7, 8, requires_grad=True),
        torch.randn(1, 2, 7, 8, requires_grad=True),
    ]


def _extra_inputs(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    """The inputs the built graph has beyond those planned without an origin."""
    built = build_graph(gm)
    # Planned as the builder plans it: repeats merged first.
    gm = rewritten(gm)
    planned = len(InputPlan(gm, analyzed(gm)).sources)
    return [built.constants[s.index] for s in built.plan.inputs[planned:]]


def test_index_arithmetic_leaves_max_nothing_to_fold():
    forward, backward = aten_graphs(_index_arithmetic, *_inputs(), train=True)
    for gm in (forward, backward):
        text = str(build_graph(gm).graph)
        assert "mo.range" in text
        assert foldable_ops(text) == [], gm.graph


def test_only_a_graph_with_ranges_gets_the_origin_input():
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum()

    forward = aten_graphs(fn, torch.randn(4, requires_grad=True), train=True)[0]
    assert _extra_inputs(forward) == []
    backward = aten_graphs(_index_arithmetic, *_inputs(), train=True)[1]
    (origin,) = _extra_inputs(backward)
    assert origin.dtype == torch.int64 and origin.device.type == "cpu"
    assert origin.dim() == 0 and origin.item() == 0


def test_ranges_from_the_origin_give_eager_s_values_and_gradients(max_calls):
    inputs = _inputs()
    leaves = [t for t in inputs if t.requires_grad]
    compiled = torch.compile(
        _index_arithmetic, backend=max_backend, options={"strict": True}
    )
    got = compiled(*inputs)
    got_grads = torch.autograd.grad(got, leaves)
    want = _index_arithmetic(*inputs)
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, torch.autograd.grad(want, leaves), strict=True):
        torch.testing.assert_close(g, w)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
