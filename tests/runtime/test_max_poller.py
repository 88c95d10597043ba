"""MAX's runtime polling thread runs only on idle cores once a CPU graph is
compiled, and nothing else is touched (runtime/max_poller.py)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
import torch

from torch_max_backend import max_backend
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
