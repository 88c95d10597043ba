"""An optimizer's step compiles in the background by default (``background_compile
="updates"``, pipeline/update_graphs.py): a training step's first call does
not wait for it, its first calls run in PyTorch, and it switches to MAX."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import compile_stats, max_backend, wait_compiled
from torch_max_backend.pipeline.update_graphs import (
    compiles_in_background,
    updates_inputs_only,
)
from torch_max_backend.settings import Settings

from .helpers import Run, assert_same_training

aten = torch.ops.aten


def _graph(
    *, returns: bool = False, writes: bool = True, random: bool = False
) -> torch.fx.GraphModule:
    """``p <- p - 0.1 * g`` as AOTAutograd hands an optimizer step over."""
    graph = torch.fx.Graph()
    p, g = graph.placeholder("p"), graph.placeholder("g")
    for node in (p, g):  # AOTAutograd's placeholders carry their fake values
        node.meta["val"] = torch.empty(3)
    step = graph.call_function(aten.mul.Tensor, (g, 0.1))
    if random:
        step = graph.call_function(
            aten.mul.Tensor, (step, graph.call_function(aten.rand_like.default, (g,)))
        )
    new = graph.call_function(aten.sub.Tensor, (p, step))
    if writes:
        graph.call_function(aten.copy_.default, (p, new))
    graph.output((new,) if returns else ())
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_only_graphs_that_update_their_inputs_and_return_nothing_qualify():
    assert updates_inputs_only(_graph())
    assert not updates_inputs_only(_graph(returns=True))  # the caller reads it
    assert not updates_inputs_only(_graph(writes=False))  # computes nothing
    assert not updates_inputs_only(_graph(random=True))  # a seed fixes its draws


def test_strict_determinism_and_the_option_keep_the_wait(monkeypatch):
    monkeypatch.delenv("TORCH_MAX_BACKEND_BACKGROUND_COMPILE", raising=False)
    update, model = _graph(), _graph(returns=True)
    default = Settings.resolve()
    assert compiles_in_background(update, "inference", default)
    assert not compiles_in_background(model, "inference", default)
    assert not compiles_in_background(update, "forward", default)
    assert not compiles_in_background(update, "inference", Settings(strict=True))
    off = Settings(background_compile=False)
    assert not compiles_in_background(update, "inference", off)
    every = Settings(background_compile=True)
    assert compiles_in_background(model, "forward", every)
    torch.use_deterministic_algorithms(True)
    try:
        assert not compiles_in_background(update, "inference", default)
    finally:
        torch.use_deterministic_algorithms(False)


def _train(model: torch.nn.Module, steps: int, compiled: bool) -> tuple[Run, list[int]]:
    g = torch.Generator().manual_seed(3)
    batches = [
        (torch.randn(8, 12, generator=g), torch.randn(8, 4, generator=g))
        for _ in range(steps)
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for p in model.parameters():  # the state its first step creates: one program
        optimizer.state[p].update(
            step=torch.tensor(0.0),
            exp_avg=torch.zeros_like(p),
            exp_avg_sq=torch.zeros_like(p),
        )
    run = Run(model, optimizer)

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.mse_loss(model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        return loss.detach()

    fn = torch.compile(step, backend=max_backend) if compiled else step
    eager_calls = []
    for i, batch in enumerate(batches):
        run.losses.append(fn(batch))
        run.lrs.append(float(optimizer.param_groups[0]["lr"]))
        eager_calls.append(compile_stats().eager_calls)
        if i == 0 and compiled:
            assert wait_compiled(timeout=900)
    return run, eager_calls


def _compiled_and_eager(steps: int) -> tuple[Run, Run, list[int]]:
    """A small model trained compiled and eagerly from one seed; how many
    graph calls ran in PyTorch by the end of each compiled step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )
    twin = copy.deepcopy(model)
    before = compile_stats().eager_calls
    got, eager_calls = _train(twin, steps, compiled=True)
    expected, _ = _train(model, steps, compiled=False)
    return got, expected, [n - before for n in eager_calls]


@pytest.mark.background_updates
def test_a_steps_update_runs_in_pytorch_until_compiled_then_on_max(
    max_calls, monkeypatch
):
    # "updates": the step waits for its forward and backward, not its update.
    monkeypatch.setenv("TORCH_MAX_BACKEND_BACKGROUND_COMPILE", "updates")
    got, expected, eager_calls = _compiled_and_eager(4)
    # The first step's update ran in PyTorch (its compile did not hold the
    # step); once compiled, every later update ran on MAX.
    assert eager_calls == [1, 1, 1, 1]
    assert max_calls.of("inference") == 3
    assert max_calls.of("backward") == 4
    assert_same_training(got, expected)
