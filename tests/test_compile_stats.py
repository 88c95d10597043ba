"""compile_stats(): graphs built, MAX compiles and in-process cache hits."""

from __future__ import annotations

import torch

import torch_max_backend
from torch_max_backend import compile_stats, max_backend, reset_compile_stats


def _simple_math(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y * 2


def test_same_structure_twice_compiles_once(max_calls):
    reset_compile_stats()
    assert compile_stats() == torch_max_backend.CompileStats()
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(
        torch.compile(_simple_math, backend=max_backend)(x, y), x + y * 2
    )
    first = compile_stats()
    assert first.graphs_built == 1
    assert first.max_compiles + first.cache_hits == 1
    assert first.build_seconds > 0
    # Dynamo forgets everything; the same MAX graph is then served from this
    # process's table: a new graph built, no new MAX compile.
    torch._dynamo.reset()
    torch.testing.assert_close(
        torch.compile(_simple_math, backend=max_backend)(x, y), x + y * 2
    )
    second = compile_stats()
    assert second.graphs_built == 2
    assert second.max_compiles == first.max_compiles
    assert second.cache_hits == first.cache_hits + 1
    assert max_calls.of("inference") == 2
    reset_compile_stats()
    assert compile_stats().graphs_built == 0
