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
