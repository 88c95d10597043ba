"""A subexpression an inference graph computes several times (a mask each
layer rebuilds) is lowered once; random draws, writes and returned tensors
stay apart."""

from __future__ import annotations

import torch

from torch_max_backend import max_backend
from torch_max_backend.lower.passes.repeats import without_repeats

from .aten_graphs import aten_graphs

aten = torch.ops.aten


def _layers(x: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = x
    for _ in range(3):
        # Each layer turns the boolean mask into an additive one, as
        # transformers' attention does.
        h = torch.softmax(h + torch.where(keep, 0.0, float("-inf")), -1) * 2
    return h, x.relu(), x.relu(), torch.rand(x.shape), torch.rand(x.shape)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    keep = torch.rand(4, 8) > 0.3
    keep[:, 0] = True
    return x, keep


def _count(gm: torch.fx.GraphModule, target: object) -> int:
    return sum(1 for n in gm.graph.nodes if n.target == target)


def test_a_repeated_mask_is_computed_once():
    (gm,) = aten_graphs(_layers, *_inputs())
    assert _count(gm, aten.where.self) == 3
    merged = without_repeats(gm)
    assert _count(merged, aten.where.self) == 1
    # Returned tensors and random draws are not merged.
    assert _count(merged, aten.relu.default) == 2
    assert _count(merged, aten.rand.default) == 2
    # The graph handed in is left as it was.
    assert _count(gm, aten.where.self) == 3
    # Nothing to merge: the same graph comes back.
    assert without_repeats(merged) is merged


def test_a_write_separates_reads_of_the_same_input():
    def reads_around_a_write(x: torch.Tensor) -> torch.Tensor:
        before = x.sum()
        x.add_(1)
        return before + x.sum()

    (gm,) = aten_graphs(reads_around_a_write, torch.ones(3))
    merged = without_repeats(gm)
    assert _count(merged, aten.sum.default) == _count(gm, aten.sum.default) == 2


def test_merged_graph_matches_eager_and_keeps_outputs_apart(max_calls):
    x, keep = _inputs()
    compiled = torch.compile(
        _layers, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    with torch.no_grad():
        got = compiled(x, keep)
        want = _layers(x, keep)
    assert max_calls.of("inference") == 1
    for g, e in zip(got[:3], want[:3], strict=True):
        torch.testing.assert_close(g, e)
    # Two equal outputs are two tensors, as in eager.
    assert got[1].data_ptr() != got[2].data_ptr()
    got[1].add_(1)
    torch.testing.assert_close(got[2], want[2])
    # Two draws are two draws.
    assert not torch.equal(got[3], got[4])


def test_arguments_equal_only_in_value_are_not_merged():
    def signed_zeros(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # 0.0 == -0.0 and 1 == 1.0 == True in Python, not to these ops.
        return x * 0.0 + 1, x * -0.0 + 1, x.pow(2) + 1, x.pow(2.0) + 1

    (gm,) = aten_graphs(signed_zeros, torch.randn(3))
    merged = without_repeats(gm)
    assert _count(merged, aten.mul.Tensor) == _count(gm, aten.mul.Tensor)
    assert len(merged.graph.nodes) == len(gm.graph.nodes)
