"""Run a training loop eagerly and under max_backend, and compare every state.

A step is ``zero_grad -> loss -> backward -> (clip) -> optimizer.step`` in one
compiled function; Dynamo breaks the graph at ``backward`` and compiles the
forward/backward pair and the optimizer step as separate MAX graphs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from torch_max_backend import max_backend

LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]
MakeOptimizer = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


@dataclass
class Run:
    """What one training run leaves behind, step by step."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    losses: list[torch.Tensor] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)


def train(
    model: torch.nn.Module,
    make_optimizer: MakeOptimizer,
    loss_of: LossFn,
    batches: Sequence[Any],
    *,
    compiled: bool,
    clip: float | None = None,
    make_scheduler: Callable[[torch.optim.Optimizer], Any] | None = None,
) -> Run:
    optimizer = make_optimizer(model.parameters())
    scheduler = make_scheduler(optimizer) if make_scheduler else None
    run = Run(model, optimizer)

    def step(batch: Any) -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.detach()

    fn = torch.compile(step, backend=max_backend) if compiled else step
    for batch in batches:
        run.losses.append(fn(batch))
        run.lrs.append(float(optimizer.param_groups[0]["lr"]))
        if scheduler is not None:
            scheduler.step()
    return run


def train_both(model: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[Run, Run]:
    """Eager run on ``model``, compiled run on a deep copy taken before it."""
    twin = copy.deepcopy(model)
    eager = train(model, *args, compiled=False, **kwargs)
    got = train(twin, *args, compiled=True, **kwargs)
    return got, eager


def assert_same_training(
    got: Run, eager: Run, *, rtol: float = 1e-4, atol: float = 1e-5
) -> None:
    """Losses, parameters, gradients, buffers and optimizer state all match."""
    torch.testing.assert_close(got.losses, eager.losses, rtol=rtol, atol=atol)
    assert got.lrs == eager.lrs
    named_eager = dict(eager.model.named_parameters())
    for name, p in got.model.named_parameters():
        q = named_eager[name]
        torch.testing.assert_close(
            p, q, rtol=rtol, atol=atol, msg=lambda m, n=name: f"param {n}: {m}"
        )
        if q.grad is not None:
            torch.testing.assert_close(
                p.grad,
                q.grad,
                rtol=rtol,
                atol=atol,
                msg=lambda m, n=name: f"grad {n}: {m}",
            )
    for (name, b), c in zip(
        got.model.named_buffers(), eager.model.buffers(), strict=True
    ):
        torch.testing.assert_close(
            b, c, rtol=rtol, atol=atol, msg=lambda m, n=name: f"buffer {n}: {m}"
        )
    eager_params = list(eager.model.parameters())
    for i, p in enumerate(got.model.parameters()):
        state, expected = got.optimizer.state[p], eager.optimizer.state[eager_params[i]]
        assert state.keys() == expected.keys()
        for key, value in expected.items():
            torch.testing.assert_close(
                state[key],
                value,
                rtol=rtol,
                atol=atol,
                msg=lambda m, k=key, i=i: f"state {k} of {i}: {m}",
            )
