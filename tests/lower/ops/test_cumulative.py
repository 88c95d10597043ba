"""Cumulative products: the family's build check, and running products
through zeros, negatives, infinities and NaNs, with their gradients."""

from __future__ import annotations

import torch

from torch_max_backend import max_backend

from .family_check import check_family
from .helpers import check_against_eager


def test_cumulative_lowerings_build_for_every_opinfo_case():
    check_family("cumulative")


def test_running_products_match_eager_through_zeros_signs_and_nans(max_calls):
    nan, inf = float("nan"), float("inf")
    edges = torch.tensor(
        [
            [2.0, -3.0, 0.5, -0.25, 4.0, 1.5],
            [2.0, 0.0, -3.0, 5.0, 1.0, 2.0],
            [1.5, nan, 2.0, 0.0, 1.0, 3.0],
            [inf, -2.0, 0.0, 1.0, 2.0, 1.0],
            [-1e20, 1e20, 1e-10, -3.0, 2.0, 1.0],
        ]
    )
    torch.manual_seed(0)
    spread = torch.randn(4, 64)

    def fn(edges, spread):
        return (
            torch.cumprod(edges, 1),
            torch.cumprod(spread, 1),
            torch.cumprod(spread.double(), 0),
            torch.cumprod(spread.to(torch.bfloat16), 1),
        )

    check_against_eager(fn, edges, spread, rtol=1e-5, atol=0.0)
    assert max_calls.count == 1


def test_cumprod_gradients_match_eager(max_calls):
    # The traced backward is itself built of cumprods, sums and scatters.
    def fn(x):
        return (torch.cumprod(x, 1) * torch.arange(6.0)).sum()

    x = torch.tensor([[2.0, -3.0, 0.5, 0.0, 4.0, 1.5], [1.0, 2.0, -1.0, 3.0, 0.5, 2.0]])
    x_eager, x_max = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
    torch.testing.assert_close(compiled(x_max), fn(x_eager))
    (got,) = torch.autograd.grad(compiled(x_max), x_max)
    (want,) = torch.autograd.grad(fn(x_eager), x_eager)
    torch.testing.assert_close(got, want)
    assert max_calls.of("forward") == 2 and max_calls.of("backward") == 1
