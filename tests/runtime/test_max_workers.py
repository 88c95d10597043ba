"""MAX's CPU workers rest at nice 19 between long executes and take their
own priority back before the next, where the process may raise it again
(runtime/max_workers.py)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from torch_max_backend import max_backend
from torch_max_backend.runtime import max_workers
from torch_max_backend.settings import Settings

from .process_settings import assert_started_only_where_allowed, simple_math

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="thread priorities and /proc"
)


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


class _Clock:
    """A perf_counter that moves only when an execute says how long it took:
    a sleep of 2.5 ms ran past 5 ms on a busy 2-core machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_workers_rest_after_a_long_execute_and_wake_for_the_next(
    monkeypatch, max_calls
):
    if not max_workers.may_raise_priority():
        pytest.skip("this process may not raise a thread's priority back")
    # Every execute counts as long here: the graph is a small one.
    monkeypatch.setattr(max_workers, "REST_AFTER_S", 0.0)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    compiled = torch.compile(simple_math, backend=max_backend)
    torch.testing.assert_close(compiled(x, y), x + y * 2)
    assert max_calls.count == 1
    assert max_workers.enabled()

    workers = max_workers.workers()
    assert workers, "MAX's workers are found by their names"
    assert all(_nice(tid) == max_workers.RESTING_NICE for tid, _ in workers)

    seen_during: list[list[int]] = []

    def execute(inputs):
        seen_during.append([_nice(tid) for tid, _ in workers])
        return inputs

    assert max_workers.run(execute, ["in"]) == ["in"]
    assert seen_during == [[own for _, own in workers]]
    assert all(_nice(tid) == max_workers.RESTING_NICE for tid, _ in workers)
    # And the compiled graph still computes eager's values.
    torch.testing.assert_close(compiled(y, x), y + x * 2)


def test_workers_stay_awake_while_another_execute_is_in_flight(monkeypatch, max_calls):
    """A long execute ending while another caller's execute runs (here one
    started inside it) leaves the workers awake for that one; they rest
    once the last execute in flight ends."""
    if not max_workers.may_raise_priority():
        pytest.skip("this process may not raise a thread's priority back")
    monkeypatch.setattr(max_workers, "REST_AFTER_S", 0.0)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(
        torch.compile(simple_math, backend=max_backend)(x, y), x + y * 2
    )
    workers = max_workers.workers()
    assert workers
    after_inner: list[list[int]] = []

    def outer(inputs):
        max_workers.run(lambda inner: inner, inputs)
        after_inner.append([_nice(tid) for tid, _ in workers])
        return inputs

    max_workers.run(outer, [1])
    assert after_inner == [[own for _, own in workers]]
    assert all(_nice(tid) == max_workers.RESTING_NICE for tid, _ in workers)


def test_a_short_execute_leaves_the_workers_awake(monkeypatch):
    if not max_workers.may_raise_priority():
        pytest.skip("this process may not raise a thread's priority back")
    monkeypatch.setattr(max_workers, "time", _Clock())  # no time passes
    # Any execute wakes them; one under REST_AFTER_S does not put them back.
    assert max_workers.run(lambda inputs: inputs, [1]) == [1]
    for tid, own in max_workers.workers():
        assert _nice(tid) == own


def test_an_execute_of_a_few_milliseconds_leaves_the_workers_awake(
    max_calls, monkeypatch
):
    """A small model's forward or training step (executes of 1-2.5 ms, called
    back to back) ran 3-7 % slower with its workers rested after each: only
    executes of REST_AFTER_S or more rest them."""
    if not max_workers.may_raise_priority():
        pytest.skip("this process may not raise a thread's priority back")
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(
        torch.compile(simple_math, backend=max_backend)(x, y), x + y * 2
    )
    clock = _Clock()
    monkeypatch.setattr(max_workers, "time", clock)

    def lasting(seconds: float):
        def execute(inputs):
            clock.now += seconds
            return inputs

        return execute

    max_workers.run(lasting(max_workers.REST_AFTER_S), [1])
    workers = max_workers.workers()
    assert workers
    assert all(_nice(tid) == max_workers.RESTING_NICE for tid, _ in workers)
    assert max_workers.run(lasting(2.5e-3), [1]) == [1]
    assert all(_nice(tid) == own for tid, own in workers)


def test_nothing_changes_where_priority_cannot_be_raised_back(monkeypatch):
    monkeypatch.setattr(max_workers, "_checked", False)
    monkeypatch.setattr(max_workers, "_enabled", False)
    monkeypatch.setattr(max_workers, "may_raise_priority", lambda: False)
    assert not max_workers.enable()
    assert not max_workers.enabled()
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch._dynamo.reset()
    compiled = torch.compile(simple_math, backend=max_backend)
    torch.testing.assert_close(compiled(x, y), x + y * 2)


def test_the_setting_and_its_variable(monkeypatch):
    assert Settings.resolve().rest_max_workers
    assert not Settings.resolve({"rest_max_workers": False}).rest_max_workers
    monkeypatch.setenv("TORCH_MAX_BACKEND_REST_MAX_WORKERS", "0")
    assert not Settings.resolve().rest_max_workers


def test_the_workers_are_enabled_only_where_the_setting_allows(monkeypatch):
    assert_started_only_where_allowed(
        monkeypatch, "rest_max_workers", "max_workers.enable"
    )
