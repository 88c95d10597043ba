"""MAX's runtime polling thread runs only on idle cores once a CPU graph is
compiled, and nothing else is touched (runtime/max_poller.py)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from torch_max_backend import max_backend
from torch_max_backend.kernels import product_timing
from torch_max_backend.runtime import max_poller
from torch_max_backend.settings import Settings

from .process_settings import assert_started_only_where_allowed, simple_math

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SCHED_IDLE and /proc are Linux's"
)


def _policy(tid: int) -> int:
    return os.sched_getscheduler(tid)


def test_the_poller_is_found_and_idled_and_nothing_else(max_calls):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    compiled = torch.compile(simple_math, backend=max_backend)
    torch.testing.assert_close(compiled(x, y), x + y * 2)
    assert max_calls.count == 1

    idled = max_poller.idled(timeout=60)
    assert len(idled) == 1, idled
    (poller,) = idled
    assert _policy(poller) == os.SCHED_IDLE
    # Still MAX's: not one of Python's threads, and still waking.
    assert poller not in {t.native_id for t in threading.enumerate()}
    # MAX's workers, Python's threads and the main thread keep their class.
    others = [int(t) for t in os.listdir("/proc/self/task") if int(t) != poller]
    assert others
    assert all(_policy(tid) == os.SCHED_OTHER for tid in others)
    workers = [
        tid
        for tid in others
        if Path(f"/proc/self/task/{tid}/comm").read_text().startswith("\U0001f525")
    ]
    assert workers, "MAX's workers are named as the search expects"


def test_a_busy_python_thread_is_not_taken_for_the_poller():
    stop = threading.Event()

    def wake_often() -> None:
        while not stop.is_set():
            stop.wait(0.0001)  # a timed futex wait, thousands a second

    thread = threading.Thread(target=wake_often, daemon=True)
    thread.start()
    try:
        assert thread.native_id not in max_poller.find_pollers()
    finally:
        stop.set()
        thread.join()


def test_the_search_is_started_only_where_the_setting_allows(monkeypatch):
    assert_started_only_where_allowed(
        monkeypatch, "idle_max_poller", "max_poller.idle_poller"
    )


def test_the_setting_and_its_variable(monkeypatch):
    assert Settings.resolve().idle_max_poller
    assert not Settings.resolve({"idle_max_poller": False}).idle_max_poller
    monkeypatch.setenv("TORCH_MAX_BACKEND_IDLE_MAX_POLLER", "0")
    assert not Settings.resolve().idle_max_poller


def test_the_search_goes_on_until_the_poller_starts():
    """A first execute may come long after the first compile (a graph that
    compiles in the background for many minutes): the search keeps looking,
    more rarely, until the poller appears."""
    looks = iter([[]] * 500 + [[4242]])
    pauses: list[float] = []
    assert max_poller.search(pauses.append, lambda: next(looks)) == [4242]
    assert len(pauses) == 501
    assert pauses[0] < 0.1 and 5.0 < pauses[-1] <= 60.0


def test_forms_are_timed_once_the_poller_is_idled(monkeypatch):
    """Timed while MAX's poller preempted their tasks, one-row products ran
    11-33 % slower than in the graphs they were timed for: the backend has
    every timing of forms wait until the poller is idled."""
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(
        torch.compile(simple_math, backend=max_backend)(x, y), x + y * 2
    )
    settle = product_timing._settle
    assert settle == max_poller.idle_for_timing
    idled_then: list[list[int]] = []

    def settle_and_look() -> None:
        settle()
        idled_then.append(max_poller.idled(timeout=0))

    monkeypatch.setattr(product_timing, "_settle", settle_and_look)
    forms = ["row_sums", "skinny"]
    times = product_timing.time_forms(1, 256, 1024, True, forms)
    assert set(times) == set(forms) and all(t > 0 for t in times.values())
    assert len(idled_then) == 1 and idled_then[0], "timed before the poller idled"
    assert all(_policy(tid) == os.SCHED_IDLE for tid in idled_then[0])


def test_without_the_setting_forms_are_timed_as_the_runtime_is():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    options = {"idle_max_poller": False}
    try:
        torch.compile(simple_math, backend=max_backend, options=options)(x, y)
        assert product_timing._settle is None
    finally:
        torch.compile(simple_math, backend=max_backend)(x, y)
    assert product_timing._settle == max_poller.idle_for_timing


def test_timing_settles_before_its_timed_calls(monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(product_timing, "_settle", lambda: order.append("settle"))
    times = product_timing.interleaved_medians(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 2, 0.0, 2
    )
    assert order == ["settle", "a", "b", "a", "b"] and set(times) == {"a", "b"}


def test_only_the_first_timing_waits_for_a_poller_not_found(monkeypatch):
    """A runtime whose poller is never found (another MAX version) costs one
    timing ``TIMING_WAIT_S``, not every timing."""
    monkeypatch.setattr(max_poller, "idle_poller", lambda: True)
    monkeypatch.setattr(max_poller, "find_pollers", lambda: [])
    monkeypatch.setattr(max_poller, "_found", threading.Event())
    monkeypatch.setattr(max_poller, "_timing_waited", False)
    monkeypatch.setattr(max_poller, "TIMING_WAIT_S", 0.2)
    waits = []
    for _ in range(3):
        started = time.perf_counter()
        max_poller.idle_for_timing()
        waits.append(time.perf_counter() - started)
    assert waits[0] >= 0.2 and max(waits[1:]) < 0.05


def test_a_timing_looks_for_the_poller_itself(monkeypatch):
    """The search may be in a pause of seconds when a timing's executes start
    the poller: the timing looks at once, and what it finds ends the
    search's waiting too."""
    found = threading.Event()
    idled_now: list[int] = []
    monkeypatch.setattr(max_poller, "idle_poller", lambda: True)
    monkeypatch.setattr(max_poller, "_found", found)
    monkeypatch.setattr(max_poller, "_idled", idled_now)
    monkeypatch.setattr(max_poller, "_timing_waited", False)
    monkeypatch.setattr(max_poller, "find_pollers", lambda: [4242])
    monkeypatch.setattr(max_poller, "_idle", lambda tids: list(tids))
    started = time.perf_counter()
    max_poller.idle_for_timing()
    assert time.perf_counter() - started < 0.5
    assert found.is_set() and idled_now == [4242]
    max_poller._record([4242])  # the search, finding it later, adds nothing
    assert idled_now == [4242]
