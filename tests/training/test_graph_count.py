"""How many MAX graphs a training step builds: forward, backward and one
optimizer update, over its first three steps (docs/benchmarks.md says what
splits a step and why)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist

from benchmarks.cases import sgd_momentum_stepper
from torch_max_backend import (
    MaxCompilerError,
    compile_stats,
    max_backend,
    reset_compile_stats,
)


def _model_and_batch() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """One model and batch for every step here: the update's graph is shared."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
    )
    return model, torch.randn(6, 8), torch.randint(0, 4, (6,))


def test_a_graph_of_views_alone_runs_in_pytorch_and_builds_nothing(max_calls):
    reset_compile_stats()
    fn = torch.compile(lambda x: x.detach().t()[1:], backend=max_backend)
    x = torch.randn(3, 4)
    torch.testing.assert_close(fn(x), x.t()[1:])
    assert compile_stats().graphs_built == 0
    assert max_calls.count == 0


def test_an_sgd_momentum_step_builds_three_graphs_over_three_steps(max_calls):
    # The benchmarks' step: momentum buffers created before the first step.
    model, x, y = _model_and_batch()
    reference = copy.deepcopy(model)
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


def test_a_traced_backward_runs_forward_and_backward_as_one_graph(max_calls):
    # Dynamo's trace_autograd_ops puts loss.backward() in the forward's graph
    # (autograd.grad and the .grad accumulation): one MAX graph where a step
    # builds two, and no autograd engine between them (docs/usage.md).
    model, x, y = _model_and_batch()
    reference = copy.deepcopy(model)
    eager = sgd_momentum_stepper(reference, x, y, traced_backward=True)
    reset_compile_stats()
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(
            sgd_momentum_stepper(model, x, y, traced_backward=True), backend=max_backend
        )
        for _ in range(3):
            torch.testing.assert_close(compiled(), eager())
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a.grad, b.grad)
    # The forward with its backward, and the optimizer's update: both graphs
    # take no gradient, so AOTAutograd hands them over as inference graphs.
    assert compile_stats().graphs_built == 2
    assert max_calls.of("forward") == 0 and max_calls.of("backward") == 0
    assert max_calls.of("inference") == 6


def test_a_traced_backward_refuses_gradient_hooks_pytorch_would_skip():
    # PyTorch's traced backward accumulates .grad itself, past every hook a
    # parameter holds: the step would give other gradients than eager's.
    model, x, y = _model_and_batch()
    model[0].weight.register_hook(lambda grad: grad * 2)
    model[2].bias.register_post_accumulate_grad_hook(lambda p: None)
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(
            sgd_momentum_stepper(model, x, y, traced_backward=True), backend=max_backend
        )
        with pytest.raises(MaxCompilerError, match="trace_autograd_ops") as info:
            compiled()
    message = str(info.value)
    assert "['0']._parameters['weight']: register_hook" in message
    assert "['2']._parameters['bias']: register_post_accumulate_grad_hook" in message
    assert "['0']._parameters['bias']" not in message


def test_a_traced_backward_is_refused_while_a_process_group_is_initialized(
    tmp_path,
):
    # DDP and FSDP all-reduce through hooks on autograd nodes, which Python
    # cannot list and a traced backward would skip.
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        model, x, y = _model_and_batch()
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            compiled = torch.compile(
                sgd_momentum_stepper(model, x, y, traced_backward=True),
                backend=max_backend,
            )
            with pytest.raises(MaxCompilerError, match="process group"):
                compiled()
    finally:
        dist.destroy_process_group()
