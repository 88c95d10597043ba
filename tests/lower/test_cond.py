"""torch.cond: a data-dependent branch lowered to MAX's cond (lower/builder/higher_order.py)."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import FallbackWarning, max_backend


def _branching(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    def positive(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        return (x.sin() + y,)

    def negative(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        return (x.cos() * y,)

    return torch.cond(x.sum() > 0, positive, negative, (x, y))[0] + 1


def test_cond_runs_both_branches_in_one_max_graph(max_calls, built_graphs):
    compiled = torch.compile(_branching, backend=max_backend, options={"strict": True})
    torch.manual_seed(0)
    x, y = torch.randn(4, 5).abs(), torch.randn(4, 5)
    for sign in (1, -1):  # one branch, then the other: no recompile
        torch.testing.assert_close(compiled(sign * x, y), _branching(sign * x, y))
    assert max_calls.count == 2
    ((_, built),) = built_graphs
    assert "mo.if" in str(built.graph)  # MAX's cond, not a select of both


def test_a_branch_that_checks_indices_runs_in_pytorch():
    # A flag computed inside a branch could not leave it: eager's error for
    # an index out of range would be lost, so the branch stays in PyTorch.
    def gathering(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        def positive(x, index):
            return (x.gather(1, index) + 1,)

        def negative(x, index):
            return (x.gather(1, index) * 2,)

        return torch.cond(x.sum() > 0, positive, negative, (x, index))[0].sin()

    compiled = torch.compile(gathering, backend=max_backend)
    x, index = torch.ones(4, 5), torch.tensor([[0, 4]] * 4)
    with pytest.warns(FallbackWarning, match="cond"):
        torch.testing.assert_close(compiled(x, index), gathering(x, index))
    with pytest.raises(RuntimeError, match="index 5 is out of bounds"):
        compiled(x, index + 1)


def test_branches_of_different_shapes_keep_pytorch_s_semantics():
    def shrinking(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(
            x.sum() > 0, lambda x: (x.sin(),), lambda x: (x[:2].cos(),), (x,)
        )[0]

    x = torch.ones(4, 5)
    strict = torch.compile(shrinking, backend=max_backend, options={"strict": True})
    with pytest.raises(Exception, match="no operand has"):
        strict(x)


def test_a_training_step_through_cond_matches_eager():
    # AOTAutograd differentiates the branch: the backward graph holds a cond
    # of the branches' gradients, lowered the same way.
    torch.manual_seed(0)
    x = torch.randn(4, 5, requires_grad=True)
    y = torch.randn(4, 5, requires_grad=True)
    compiled = torch.compile(_branching, backend=max_backend, options={"strict": True})
    for sign in (1, -1):
        got = [t.detach().clone().requires_grad_() for t in (sign * x, y)]
        want = [t.detach().clone().requires_grad_() for t in (sign * x, y)]
        compiled(*got).square().sum().backward()
        _branching(*want).square().sum().backward()
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.grad, w.grad)
