"""The lowering kit reads FX nodes' arguments and fake tensors (no MAX build)."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend.lower import kit

aten = torch.ops.aten


def _node(fn, *inputs: torch.Tensor, target, mode: str = "fake") -> torch.fx.Node:
    traced = make_fx(fn, tracing_mode=mode)(*inputs)
    (node,) = [n for n in traced.graph.nodes if n.target is target]
    return node


def test_arguments_are_read_positional_or_keyword():
    node = _node(
        lambda x: torch.sort(x, 0), torch.zeros(3, 4), target=aten.sort.default
    )
    assert kit.node_arg(node, 1, "dim", -1) == 0
    assert kit.node_arg(node, 2, "descending", False) is False  # the default
    assert kit.schema_args(node)["dim"] == 0
    node.kwargs = {"descending": True}
    assert kit.node_arg(node, 2, "descending", False) is True
    assert kit.schema_args(node)["descending"] is True


def test_fake_tensors_of_arguments_and_results():
    x = torch.zeros(2, 0, 3)
    node = _node(lambda t: t.sum(1), x, target=aten.sum.dim_IntList)
    meta = kit.arg_tensor(node, 0)
    assert meta.shape == x.shape and kit.arg_meta(node, 0) is meta
    assert kit.fake_tensor(node).shape == (2, 3)
    assert kit.arg_meta(node, 1) is None  # a list of ints, not a tensor
    with pytest.raises(TypeError):
        kit.arg_tensor(node, 1)
    assert kit.has_no_elements(meta) and not kit.has_no_elements(kit.fake_tensor(node))
    assert kit.empty_input(node) == "aten.sum.dim_IntList of a tensor with no elements"


def test_static_and_symbolic_sizes():
    node = _node(
        lambda t: t * 2, torch.zeros(4, 5), target=aten.mul.Tensor, mode="symbolic"
    )
    assert not kit.is_static(kit.arg_tensor(node, 0).shape)
    assert kit.has_symbolic_sizes(node)
    assert kit.size_hint(kit.arg_tensor(node, 0).shape[0]) == 4
    node = _node(lambda t: t * 2, torch.zeros(4, 5), target=aten.mul.Tensor)
    assert kit.is_static(kit.arg_tensor(node, 0).shape)
    assert not kit.has_symbolic_sizes(node)


def test_all_of_passes_where_each_passes_and_joins_their_summaries():
    def first(node: torch.fx.Node) -> str | None:
        """Floating-point inputs."""
        return None

    def second(node: torch.fx.Node) -> str | None:
        """Static sizes.

        Details left out of the summary.
        """
        return "symbolic"

    check = kit.all_of(first, second)
    assert check.__doc__ == "floating-point inputs; static sizes."
    node = _node(lambda t: t * 2, torch.zeros(4), target=aten.mul.Tensor)
    assert check(node) == "symbolic"
    assert kit.all_of(first)(node) is None


def test_same_sizes_compares_symbolic_sizes_by_expression_without_guards():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    s0 = env.create_unbacked_symint()  # no hint: comparing with == would raise
    s1 = env.create_unbacked_symint()
    assert kit.same_sizes([s0, 4], [s0, 4])
    assert not kit.same_sizes([s0, 4], [s1, 4])
    assert not kit.same_sizes([s0, 4], [4, 4])
    assert not kit.same_sizes([2, 4], [2, 4, 1])
    assert kit.same_sizes([], [])
