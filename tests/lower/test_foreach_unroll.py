"""The foreach unrolling pass (passes/foreach_unroll.py) on ATen graphs: list
ops of a graph that writes its inputs become one op per element; elsewhere,
and where an element is not a plain tensor result, the graph is kept."""

from __future__ import annotations

import operator

import torch

from torch_max_backend.lower.passes.foreach_unroll import unrolled_foreach

from .aten_graphs import aten_graphs


def _targets(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_a_graph_writing_no_input_keeps_its_list_ops():
    def scaled(xs: list[torch.Tensor]) -> list[torch.Tensor]:
        return torch._foreach_mul(xs, 2.0)

    (gm,) = aten_graphs(scaled, [torch.randn(3), torch.randn(2, 2)])
    assert unrolled_foreach(gm) is gm


def test_an_in_place_update_is_unrolled_per_element_with_its_values():
    def update(xs, ys, zs):
        torch._foreach_addcmul_(xs, ys, zs, value=0.5)
        torch._foreach_div_(xs, [torch.tensor(2.0), torch.tensor(4.0)])

    shapes = [(3,), (2, 2)]
    inputs = [[torch.randn(s) for s in shapes] for _ in range(3)]
    (gm,) = aten_graphs(update, *inputs, keep_inference_input_mutations=True)
    unrolled = unrolled_foreach(gm)
    targets = _targets(unrolled)
    assert not any(str(t).startswith("aten._foreach") for t in targets)
    assert operator.getitem not in targets
    # Every node the pass built carries its element's shape.
    for node in unrolled.graph.nodes:
        if (
            node.op == "call_function"
            and node.target is not torch.ops.aten.copy_.default
        ):
            assert isinstance(node.meta["val"], torch.Tensor), node
    # The unrolled graph computes what the list ops compute (run here in
    # PyTorch, whose addcmul rounds (value * t1) * t2, where our lowering of
    # the list op and the unrolled ops both take value * (t1 * t2)).
    expected = [[t.clone() for t in ts] for ts in inputs]
    got = [[t.clone() for t in ts] for ts in inputs]
    gm(*[t for ts in expected for t in ts])
    unrolled(*[t for ts in got for t in ts])
    for g, e in zip(got[0], expected[0], strict=True):
        torch.testing.assert_close(g, e)
