"""Dynamic sizes: SymInt arithmetic and ranges lower to MAX shape expressions."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import (
    FallbackWarning,
    compile_stats,
    max_backend,
    reset_compile_stats,
)


def _positions(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = x.shape[1]
    return (
        x + torch.arange(n),  # what position ids in transformers do
        torch.arange(1, n) * 2,
        torch.arange(0, n, 3),  # ceil(n / 3) elements
        torch.arange(n, dtype=torch.float32)[None] * x,
        # Python's sum() of sizes, which Dynamo traces as torch.sym_sum.
        x.repeat(1, 2)[:, : sum([n, n // 2, 1])] - 1,
    )


def test_symbolic_aranges_serve_every_size_with_one_compile(max_calls):
    compiled = torch.compile(_positions, backend=max_backend, fullgraph=True)
    reset_compile_stats()
    for n in (5, 8, 13):
        x = torch.randn(2, n)
        torch._dynamo.mark_dynamic(x, 1)
        for got, expected in zip(compiled(x), _positions(x), strict=True):
            torch.testing.assert_close(got, expected)
    assert max_calls.of("inference") == 3
    assert compile_stats().graphs_built == 1


def _scaled_rows(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    # n is a Python int that changes from call to call: Dynamo makes it a
    # symbolic int input that is no tensor's size.
    return x * n + 1, x.reshape(n, -1) - n


def test_an_int_argument_that_changes_stays_on_max(max_calls):
    compiled = torch.compile(_scaled_rows, backend=max_backend)
    reset_compile_stats()
    for n in (2, 3, 4, 6):
        x = torch.randn(n, 12)
        for got, expected in zip(compiled(x, n), _scaled_rows(x, n), strict=True):
            torch.testing.assert_close(got, expected)
    # The first call specializes n; from the second, one graph serves every n
    # (a fallback would warn, which the suite turns into an error).
    assert max_calls.of("inference") == 4
    assert compile_stats().graphs_built == 2


def _counted(x: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
    # n is no size of x: MAX gets it as an input of its own.
    return x * n + 1, x[:n] * 2, torch.arange(n) + n


def _graphs_over(fn: Callable[..., tuple], x: torch.Tensor, ns: tuple) -> int:
    """How many graphs ``fn`` compiled over ``ns``, each call against eager."""
    compiled = torch.compile(fn, backend=max_backend)
    reset_compile_stats()
    for n in ns:
        for got, expected in zip(compiled(x, n), fn(x, n), strict=True):
            torch.testing.assert_close(got, expected)
    return compile_stats().graphs_built


def test_an_int_argument_that_is_no_size_is_an_input_of_its_own(max_calls):
    assert _graphs_over(_counted, torch.randn(6, 3), (2, 3, 5, 6)) == 2
    assert max_calls.of("inference") == 4


def test_an_int_argument_reaches_the_backward_on_max(max_calls):
    def loss(w: torch.Tensor, n: int) -> torch.Tensor:
        return (torch.tanh(w) * n).sum()

    compiled = torch.compile(loss, backend=max_backend)
    for n in (2, 3, 5):
        w = torch.randn(4, 3, requires_grad=True)
        expected_w = w.detach().clone().requires_grad_()
        compiled(w, n).backward()
        loss(expected_w, n).backward()
        torch.testing.assert_close(w.grad, expected_w.grad)
    # From the second call, one forward and one backward serve every n.
    assert max_calls.of("forward") == 3 and max_calls.of("backward") == 3


def test_backward_inputs_sized_by_expressions_train_on_max(max_calls):
    """A Linear over [batch, tokens, width] saves its input viewed as
    [tokens * s0, width] for the backward; a sequence length that changes
    each batch (dynamic padding) makes those sizes expressions, and the
    backward stays on MAX, its inputs rebound to them."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)
    )
    expected = copy.deepcopy(model)
    compiled = torch.compile(model, backend=max_backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for tokens in (5, 7, 9):
            x = torch.randn(2, tokens, 16)
            compiled(x).square().sum().backward()
            expected(x).square().sum().backward()
            for got, want in zip(
                model.parameters(), expected.parameters(), strict=True
            ):
                torch.testing.assert_close(got.grad, want.grad)
                got.grad = want.grad = None
    # The first size compiles a static pair; the next two share a dynamic one.
    assert max_calls.of("forward") == 3 and max_calls.of("backward") == 3


def _numbers(x: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
    # n is used only as a number: arithmetic Dynamo leaves on the SymInt
    # (true division, remainder, floor, power, max) and numbers of ops.
    return (
        x * n + 1,
        x * (n / 2) - n % 3,
        x / (n * n + 1) + n // 2,
        x * math.floor(n / 4) + (-n) ** 2 + max(n, 1) - abs(n),
    )


def test_an_int_argument_used_as_a_number_may_be_negative(max_calls):
    # From the second call one graph serves every n, whatever its sign: n is
    # fed as a value, not as a dim (a fallback would warn, an error here).
    assert _graphs_over(_numbers, torch.randn(6, 3), (2, 3, -4, 5, -7)) == 2
    assert max_calls.of("inference") == 5


def _sized(x: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
    # Sizes from Python arithmetic: a remainder, a ratio rounded up (never 1
    # from the second call: Dynamo would specialize a size of 1), and n as
    # a pad.
    return (
        x[:, : n % 3 + 2] * 2,
        x.reshape(-1)[: math.ceil(n / 2)] + 1,
        F.pad(x, (0, n)) - 1,
    )


def test_sizes_from_an_int_argument_stay_on_max(max_calls):
    assert _graphs_over(_sized, torch.randn(6, 5), (2, 3, 4, 5, 7)) == 2
    assert max_calls.of("inference") == 5


def _halved(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # A -1 beside a symbolic size: MAX cannot prove the element counts equal.
    return x.reshape(x.shape[0] // 2, -1) * 2, x.reshape(int(x.shape[0] / 2), -1)


def test_a_view_with_a_symbolic_size_beside_minus_one_stays_on_max(max_calls):
    compiled = torch.compile(_halved, backend=max_backend)
    for rows in (4, 6, 10):
        x = torch.randn(rows, 3)
        torch._dynamo.mark_dynamic(x, 0)
        for got, expected in zip(compiled(x), _halved(x), strict=True):
            torch.testing.assert_close(got, expected)
    assert max_calls.of("inference") == 3


def _window_padded(x: torch.Tensor) -> torch.Tensor:
    # Swin pads its feature map up to a multiple of the window: amounts that
    # are symbolic but never negative, and 0 for some sizes.
    h, w = x.shape[1], x.shape[2]
    return F.pad(x, (0, 0, 0, (4 - w % 4) % 4, 0, (4 - h % 4) % 4)) * 2 + 1


def test_padding_by_symbolic_amounts_stays_on_max(max_calls):
    compiled = torch.compile(_window_padded, backend=max_backend)
    for h, w in ((5, 6), (7, 9), (8, 8)):
        x = torch.randn(2, h, w, 3)
        torch._dynamo.mark_dynamic(x, 1)
        torch._dynamo.mark_dynamic(x, 2)
        torch.testing.assert_close(compiled(x), _window_padded(x))
    assert max_calls.of("inference") == 3


def test_an_int_argument_specialized_by_an_op_is_a_constant(max_calls):
    def spaced(x: torch.Tensor, n: int) -> torch.Tensor:
        return torch.linspace(0, 1, n) + x[0]

    compiled = torch.compile(spaced, backend=max_backend)
    x = torch.randn(1)
    for n in (2, 3):
        torch.testing.assert_close(compiled(x, n), spaced(x, n))
    # linspace guards its count: the second graph's int input is the
    # constant 3, which MAX needs no input for.
    assert max_calls.of("inference") == 2


def test_an_op_that_needs_its_number_at_compile_time_runs_in_pytorch():
    def picks(x: torch.Tensor, n: int) -> torch.Tensor:
        return x.topk(n).values

    compiled = torch.compile(picks, backend=max_backend)
    x = torch.randn(8)
    compiled(x, 2)
    with pytest.warns(FallbackWarning) as caught:
        torch.testing.assert_close(compiled(x, 3), picks(x, 3))
    message = str(caught[0].message)
    # A named reason, not an internal error.
    assert "topk with k known only at run time" in message
    assert "internal error" not in message


def _powers(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x**n * 0.5 + 1, x.abs() ** (n / 2) - x


def test_a_power_known_at_run_time_stays_on_max(max_calls):
    # Negative bases: odd powers keep the sign, x ** 0 is 1, 0 ** -1 is inf.
    x = torch.tensor([-2.0, -1.5, 0.0, 0.5, 1.0, 3.0])
    compiled = torch.compile(_powers, backend=max_backend)
    for n in (2, 3, 0, -1, 4, -3):
        for got, expected in zip(compiled(x, n), _powers(x, n), strict=True):
            torch.testing.assert_close(got, expected, equal_nan=True)
    assert max_calls.of("inference") == 6
