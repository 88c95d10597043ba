"""Writes into a view (select_scatter, slice_scatter): the family's build
check, which strategy each slice write takes, and its values against eager."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import explain
from torch_max_backend.lower.builder import build_graph
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import (
    MAPPING_TORCH_ATEN_TO_MAX,
    strategy_for,
    unsupported_reason,
)

from .family_check import check_family
from .helpers import check_against_eager

aten = torch.ops.aten


def test_view_update_lowerings_build_for_every_opinfo_case():
    check_family("view_updates", ("aten.diagonal_scatter.default",))


def _slice_write(start, end, step, size=8):
    def fn(x, src):
        return torch.slice_scatter(x, src, 1, start, end, step)

    x = torch.zeros(2, size, 3)
    return fn, x, torch.zeros(2, len(range(size)[start:end:step]), 3)


# (id, expected strategy, start, end, step, size): static slices of step 1,
# and strided ones taking one element of every group, are spliced in by
# concatenation; a strided slice that misses a group gathers.
STRATEGY_CASES = [
    ("middle", "concatenation", 2, 5, 1, 8),
    ("head", "concatenation", None, 3, 1, 8),
    ("tail-negative", "concatenation", -3, None, 1, 8),
    ("whole", "concatenation", None, None, 1, 8),
    ("empty", "concatenation", 5, 2, 1, 8),
    ("every-second-from-1", "concatenation", 1, None, 2, 8),
    ("every-fourth", "concatenation", 3, None, 4, 8),
    ("every-second-odd-size", "gather", 0, None, 2, 7),
    ("stops-early", "gather", 0, 6, 2, 8),
    ("starts-late", "gather", 2, None, 2, 8),
]


@pytest.mark.parametrize(
    ("expected", "start", "end", "step", "size"),
    [case[1:] for case in STRATEGY_CASES],
    ids=[case[0] for case in STRATEGY_CASES],
)
def test_each_slice_write_takes_its_strategy(expected, start, end, step, size):
    register_families()
    fn, x, src = _slice_write(start, end, step, size)
    gm = make_fx(fn)(x, src)
    (node,) = [n for n in gm.graph.nodes if n.target is aten.slice_scatter.default]
    lower = MAPPING_TORCH_ATEN_TO_MAX[node.target]
    assert unsupported_reason(lower, node) is None
    assert strategy_for(lower, node) == expected
    text = str(build_graph(gm).graph)
    # MAX compiles a gather and select in about twice a concatenation's time.
    assert ("mo.gather" in text) == (expected == "gather"), text


def test_slice_writes_match_eager_exactly(max_calls):
    torch.manual_seed(0)
    x = torch.randn(2, 8, 3)
    y = torch.randn(2, 7, 3)

    def fn(x, y):
        s = torch.slice_scatter
        return (
            s(x, torch.full((2, 3, 3), 5.0), 1, 2, 5),
            s(x, torch.full((2, 3, 3), 6.0), 1, -3),
            s(x, torch.full((2, 8, 3), 7.0), 1),
            s(x, torch.full((2, 0, 3), 8.0), 1, 5, 2),
            s(x, torch.full((2, 4, 3), 9.0), 1, 1, None, 2),
            s(x, torch.full((2, 2, 3), 1.5), 1, 3, None, 4),
            s(x, torch.full((1, 8, 3), 2.5), 0, 1),
            s(x, torch.full((2, 8, 2), 3.5), 2, 1, 3),
            s(y, torch.full((2, 4, 3), 4.5), 1, 0, None, 2),
            s(x, torch.full((2, 3, 3), 5.5), 1, 0, 6, 2),
        )

    check_against_eager(fn, x, y, rtol=0, atol=0)
    assert max_calls.count == 1


def test_gradients_of_slices_match_eager(max_calls):
    # The backward of slicing (rotate_half, every-other channels) writes each
    # slice's gradient into zeros: slice_scatter of both strategies.
    def fn(x):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return (rotated * x).sum() + (x[..., ::2] ** 2).sum() + x[:, 1:6:2].sum()

    torch.manual_seed(0)
    x = torch.randn(2, 7, 8, requires_grad=True)
    expected = torch.autograd.grad(fn(x), x)[0]
    compiled = torch.compile(fn, backend="max", options={"strict": True})
    got = torch.autograd.grad(compiled(x), x)[0]
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert max_calls.count == 2


def _diagonal_writes(x: torch.Tensor, rect: torch.Tensor, grad: torch.Tensor):
    return (
        torch.diagonal_scatter(x, torch.ones(4, 3)),
        torch.diagonal_scatter(x, torch.full((4, 2), 2.0), offset=2),
        torch.diagonal_scatter(x, torch.full((4, 2), 3.0), -1, 0, 2),
        torch.diagonal_scatter(rect, torch.arange(2.0), -3, 1, 0),
        # A diagonal's gradient (diagonal_backward), as backward graphs
        # hold it; its decomposition writes the diagonal.
        aten.diagonal_backward(grad, [3, 5, 4], 1, 2, -2),
    )


def test_diagonal_writes_match_eager_and_train():
    # diagonal_scatter was decomposed by a write through a view, which
    # AOTAutograd refused: torch.diag in a training step failed to compile.
    torch.manual_seed(0)
    check_against_eager(
        _diagonal_writes,
        torch.randn(3, 4, 4),
        torch.randn(3, 5),
        torch.randn(3, 4),
    )
    weight = torch.nn.Parameter(torch.randn(4, 4))
    report = explain(
        lambda x: (torch.diag(x @ weight) ** 2).sum() + x.diagonal(1).sum(),
        torch.randn(4, 4),
        training=True,
    )
    assert report.unsupported == {}
