"""The product layouts every kernel strategy for mm and addmm must read: a
Linear's weight [N, K] with a bias, a weight [K, N], rows read transposed, K
empty, one row; and a Linear over a dynamic batch (shared by the
strategies' tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend


def layout_inputs(rows: int, k: int, n: int) -> tuple[torch.Tensor, ...]:
    """Seeded operands for ``layout_products``."""
    torch.manual_seed(0)
    return (
        torch.randn(rows, k),
        torch.randn(n, k),
        torch.randn(n),
        torch.randn(k, n),
        torch.randn(k, rows),
        torch.randn(4, 0),
        torch.randn(0, 6),
        torch.randn(1, k),
    )


def layout_products(
    x: torch.Tensor,
    w_nk: torch.Tensor,
    bias: torch.Tensor,
    w_kn: torch.Tensor,
    xt: torch.Tensor,
    empty_x: torch.Tensor,
    empty_w: torch.Tensor,
    row: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """The Linear with a bias, ``x @ w_kn``, ``xt^T @ w_kn``, the empty
    product, and one row through the Linear's weight."""
    return (
        F.linear(x, w_nk, bias),
        torch.mm(x, w_kn),
        torch.mm(xt.t(), w_kn),
        torch.mm(empty_x, empty_w),
        F.linear(row, w_nk),
    )


def integer_linear(dtype: torch.dtype) -> tuple[torch.nn.Linear, torch.Tensor]:
    """A Linear (40 to 70) of small integer weights and bias in ``dtype``, and
    6 integer rows for it: every float32 sum exact, so a product's rounding
    alone decides its result."""
    gen = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(40, 70).eval()
    with torch.no_grad():
        linear.weight.copy_(torch.randint(-40, 41, (70, 40), generator=gen))
        linear.bias.copy_(torch.randint(-9, 10, (70,), generator=gen))
    x = torch.randint(-40, 41, (6, 40), generator=gen).to(dtype)
    return linear.to(dtype), x


def check_symbolic_batch(
    max_calls: Any,
    graph_texts: Callable[[], list[str]],
    strategy: str,
    kernel: str,
    k: int,
    n: int,
    batches: tuple[int, ...],
) -> None:
    """A Linear (K to N) compiled with ``product_strategy=strategy`` matches
    eager at each of ``batches`` (a dynamic row count), all in one graph
    that calls ``kernel``."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(k, n).eval()
    compiled = torch.compile(
        layer, backend=max_backend, options={"product_strategy": strategy}
    )
    for rows in batches:
        x = torch.randn(rows, k)
        torch._dynamo.mark_dynamic(x, 0)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), layer(x), rtol=1e-5, atol=1e-5)
    assert max_calls.count == len(batches)
    (text,) = graph_texts()  # one graph for every batch
    assert kernel in text


def one_graph_matching_eager(
    max_calls: Any,
    graph_texts: Callable[[], list[str]],
    fn: Callable[..., tuple[torch.Tensor, ...]],
    inputs: tuple[torch.Tensor, ...],
    strategy: str,
) -> str:
    """``fn`` compiled with ``product_strategy=strategy`` matches eager on
    ``inputs`` in one MAX call; that graph's text."""
    compiled = torch.compile(
        fn, backend=max_backend, options={"product_strategy": strategy}
    )
    for got, want in zip(compiled(*inputs), fn(*inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert max_calls.count == 1
    (text,) = graph_texts()
    return text
