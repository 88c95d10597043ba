"""Dynamic sizes: SymInt arithmetic and ranges lower to MAX shape expressions."""

from __future__ import annotations

import torch

from torch_max_backend import compile_stats, max_backend, reset_compile_stats


def _positions(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = x.shape[1]
    return (
        x + torch.arange(n),  # what position ids in transformers do
        torch.arange(1, n) * 2,
        torch.arange(0, n, 3),  # ceil(n / 3) elements
        torch.arange(n, dtype=torch.float32)[None] * x,
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


def test_an_int_argument_that_is_no_size_is_an_input_of_its_own(max_calls):
    compiled = torch.compile(_counted, backend=max_backend)
    reset_compile_stats()
    x = torch.randn(6, 3)
    for n in (2, 3, 5, 6):
        for got, expected in zip(compiled(x, n), _counted(x, n), strict=True):
            torch.testing.assert_close(got, expected)
    assert max_calls.of("inference") == 4
    assert compile_stats().graphs_built == 2


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
