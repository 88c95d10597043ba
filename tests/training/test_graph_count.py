"""How many MAX graphs a training step builds: forward, backward and one
optimizer update, over its first three steps (docs/benchmarks.md says what
splits a step and why)."""

from __future__ import annotations

import copy

import torch

from benchmarks.cases import sgd_momentum_stepper
from torch_max_backend import compile_stats, max_backend, reset_compile_stats


def test_a_graph_of_views_alone_runs_in_pytorch_and_builds_nothing(max_calls):
    reset_compile_stats()
    fn = torch.compile(lambda x: x.detach().t()[1:], backend=max_backend)
    x = torch.randn(3, 4)
    torch.testing.assert_close(fn(x), x.t()[1:])
    assert compile_stats().graphs_built == 0
    assert max_calls.count == 0


def test_an_sgd_momentum_step_builds_three_graphs_over_three_steps(max_calls):
    # The benchmarks' step: momentum buffers created before the first step.
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
    )
    reference = copy.deepcopy(model)
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    compiled = torch.compile(sgd_momentum_stepper(model, x, y), backend=max_backend)
    eager = sgd_momentum_stepper(reference, x, y)
    reset_compile_stats()
    for _ in range(3):
        torch.testing.assert_close(compiled(), eager())
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    # Forward, backward, the optimizer update; the resumed `return
    # loss.detach()` after optimizer.step() is views alone, run in PyTorch.
    assert compile_stats().graphs_built == 3
    assert max_calls.of("forward") == 3 and max_calls.of("backward") == 3
    assert max_calls.of("inference") == 3
