"""The cumulative family: its build check; running products through zeros,
negatives, infinities and NaNs; running maxima and minima through ties and
NaNs; running log-sum-exps through infinities; and their gradients."""

from __future__ import annotations

import torch

from torch_max_backend import explain, max_backend

from .family_check import check_family
from .helpers import check_against_eager


def _check_loss_and_gradient(fn, x: torch.Tensor, max_calls) -> None:
    """``fn(x)``, a scalar, and its gradient match eager, all on MAX."""
    x_eager, x_max = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
    torch.testing.assert_close(compiled(x_max), fn(x_eager))
    (got,) = torch.autograd.grad(compiled(x_max), x_max)
    (want,) = torch.autograd.grad(fn(x_eager), x_eager)
    torch.testing.assert_close(got, want)
    assert max_calls.of("forward") == 2 and max_calls.of("backward") == 1


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
    _check_loss_and_gradient(fn, x, max_calls)


def test_running_extremes_match_eager_through_ties_nans_and_dtypes(max_calls):
    nan, inf = float("nan"), float("inf")
    edges = torch.tensor(
        [
            [1.0, 3.0, 3.0, 2.0, 5.0, 5.0, -1.0],
            [2.0, nan, 4.0, nan, 1.0, 7.0, 0.0],
            [-inf, -inf, 0.0, inf, inf, -2.0, 1.0],
            [0.0, -0.0, 0.0, -1.0, -1.0, -3.0, -3.0],
        ]
    )
    torch.manual_seed(0)
    spread = torch.randn(3, 37, 5)
    ints = torch.randint(-4, 4, (5, 9))

    def fn(edges, spread, ints):
        return (
            *torch.cummax(edges, 1),
            *torch.cummin(edges, -1),
            *torch.cummax(spread, 1),
            *torch.cummin(spread.to(torch.bfloat16), 0),
            *torch.cummax(ints, 1),
            *torch.cummin(ints, 0),
            *torch.cummax(ints > 0, 1),
            *torch.cummax(spread[0, 0, 0], 0),
        )

    check_against_eager(fn, edges, spread, ints, rtol=0.0, atol=0.0)
    assert max_calls.count == 1


def test_running_log_sum_exps_match_eager_through_infinities_and_nans(max_calls):
    nan, inf = float("nan"), float("inf")
    edges = torch.tensor(
        [
            [-inf, -inf, 0.0, -inf, 2.0, 2.0],
            [1.0, inf, 3.0, -inf, inf, 0.0],
            [0.5, nan, 1.0, 2.0, -1.0, 0.0],
            [100.0, -100.0, 100.0, 99.0, -50.0, 0.0],
        ]
    )
    torch.manual_seed(0)
    spread = torch.randn(4, 100) * 10

    def fn(edges, spread):
        return (
            torch.logcumsumexp(edges, 1),
            torch.logcumsumexp(spread, 1),
            torch.logcumsumexp(spread.double(), 0),
            torch.logcumsumexp(spread.to(torch.bfloat16), 1),
        )

    check_against_eager(fn, edges, spread, rtol=1e-5, atol=1e-5)
    assert max_calls.count == 1


def test_running_extreme_and_log_sum_exp_gradients_match_eager(max_calls):
    # Their backwards are scatter_adds by the indices, and a log-sum-exp of
    # the reversed gradient: built of lowered ops too.
    def fn(x):
        values, _ = torch.cummax(x, 1)
        return (values * torch.logcumsumexp(x, 0)).sum()

    torch.manual_seed(0)
    x = torch.randn(4, 9)
    _check_loss_and_gradient(fn, x, max_calls)


def test_a_scan_along_a_symbolic_dim_runs_in_pytorch_and_says_why():
    # A scan takes log2(size) rounds, which a symbolic size does not give.
    def fn(x):
        return torch.cummax(x, 1)[0] + torch.logcumsumexp(x, 0)

    x = torch.randn(3, 5)
    torch._dynamo.mark_dynamic(x, 1)
    ops = {row["op"]: row for row in explain(fn, x).as_dict()["graphs"][0]["ops"]}
    cummax = ops["aten.cummax.default"]
    assert not cummax["on_max"]
    assert cummax["reason"] == "aten.cummax.default along a symbolic dim"
    assert ops["aten.logcumsumexp.default"]["on_max"]  # along the static dim 0
