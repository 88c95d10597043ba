"""Graphs that mutate many inputs: past MAX_BUFFERS, new values are outputs
the runtime copies back (MAX's compile time climbs steeply with buffers)."""

from __future__ import annotations

import torch

from torch_max_backend import max_backend
from torch_max_backend.lower.passes.mutations import MAX_BUFFERS


def test_an_update_of_more_inputs_than_buffers_writes_back_every_one(
    max_calls, built_graphs
):
    count = MAX_BUFFERS + 8  # an optimizer step over 32 parameters
    params = [torch.randn(3 + i % 4, 5) for i in range(count)]
    grads = [torch.randn_like(p) for p in params]
    expected = [p - 0.1 * g for p, g in zip(params, grads, strict=True)]
    versions = [p._version for p in params]

    @torch.compile(backend=max_backend, options={"strict": True})
    def step(params, grads):
        torch._foreach_add_(params, grads, alpha=-0.1)

    step(params, grads)
    for got, want in zip(params, expected, strict=True):
        torch.testing.assert_close(got, want)
    # torch sees the writes (autograd and optimizers read version counters).
    assert all(p._version > v for p, v in zip(params, versions, strict=True))
    ((_, built),) = built_graphs
    plan = built.plan
    assert plan.mutated == ()
    assert sorted(i for i, _ in plan.written_back) == list(range(count))
    assert max_calls.of("inference") == 1

    step(params, grads)  # the same graph again, from the new values
    for got, want, g in zip(params, expected, grads, strict=True):
        torch.testing.assert_close(got, want - 0.1 * g)
    assert max_calls.of("inference") == 2
