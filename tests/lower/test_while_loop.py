"""torch's while_loop lowered to MAX's while_loop (lower/builder/higher_order.py)."""

from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops import while_loop

from torch_max_backend import FallbackWarning, max_backend


def _doubling(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    def keep_going(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return i < x.abs().sum().long()

    def step(i: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return i + 1, x * y + 1  # y: read from the enclosing graph

    count, value = while_loop(keep_going, step, (torch.zeros((), dtype=torch.int64), x))
    return value * count


def test_while_loop_runs_on_max_as_many_times_as_eager(max_calls, built_graphs):
    compiled = torch.compile(_doubling, backend=max_backend, options={"strict": True})
    y = torch.full((2, 3), 0.5)
    for start in (0.5, 2.0):  # a different number of trips, one compile
        x = torch.full((2, 3), start)
        torch.testing.assert_close(compiled(x, y), _doubling(x, y))
    assert max_calls.count == 2
    ((_, built),) = built_graphs
    assert "mo.while" in str(built.graph)


def test_a_body_that_checks_indices_runs_in_pytorch():
    # A flag computed inside the loop could not leave it: eager's error for
    # an index out of range would be lost, so the loop stays in PyTorch.
    def gathering(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        def keep_going(i, x):
            return i < 3

        def step(i, x):
            return i + 1, x.gather(1, index) + x

        start = torch.zeros((), dtype=torch.int64)
        return while_loop(keep_going, step, (start, x))[1].sin()

    compiled = torch.compile(gathering, backend=max_backend)
    x, index = torch.ones(2, 3), torch.tensor([[0, 2, 1]] * 2)
    with pytest.warns(FallbackWarning, match="while_loop"):
        torch.testing.assert_close(compiled(x, index), gathering(x, index))
