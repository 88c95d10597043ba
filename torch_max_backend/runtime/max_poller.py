"""MAX's runtime polling thread runs only where a core is idle.

At a process's first execute MAX's CPU runtime starts a thread of its own
that waits on a condition with a 100 us timeout, over and over: it wakes
about 5,300 times a second whether or not anything runs. Each wake preempts
whichever of MAX's worker threads holds that core. On 2 cores (Intel Xeon,
2026-11-30) a product split into two equal tasks ran one in 475 us and the
other, on the poller's core, in 620-680 us; moving the poller to the other
core moved the slow task with it. The whole graph waits for its slowest
task, so every kernel paid it.

Linux's ``SCHED_IDLE`` class runs a thread only on a core that has nothing
else to run: the poller keeps polling, but never in a worker's time. In the
same processes, alternating: the MLP's forward 1.87 -> 1.62 ms, ResNet-18's
30.5 -> 23.9 ms, their training steps 8.0 -> 6.8 and 93 -> 78 ms.

The thread has no name of its own and MAX offers no handle to it, so it is
found by what it does: a native thread (not one of Python's, not one of
MAX's workers) that wakes at least a thousand times a second and sleeps in a
timed futex wait. Nothing else is touched; without ``/proc`` or
``SCHED_IDLE`` (not Linux) nothing is done. The compile pipeline and the
export runner (which has no torch) both start the search, so this module
imports nothing of ours but the base.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator

from .. import logs
from ..native_threads import is_max_worker, read_task_file, thread_ids

_log = logs.get_logger("runtime")
_lock = threading.Lock()
_started = False
_found = threading.Event()
_idled: list[int] = []
_timing_waited = False
# How long the first timing of forms looks for the poller: one that is
# running is found in one look (20 ms sampled).
TIMING_WAIT_S = 1.0

# What separates the poller from a thread that merely woke a few times.
_SAMPLE_S = 0.02
_MIN_WAKES_PER_S = 1000
# futex(2) is syscall 202 on x86-64 and 98 on arm64; the poller's wait is
# FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG (0x89) with a timeout.
_FUTEX_SYSCALLS = {"202", "98"}
_TIMED_WAIT_OP = 0x89


# The pauses between looks for the poller, from the first CPU graph's
# compile on: it starts at the first execute, usually right after (a model
# of 2 ms calls has run hundreds of them within a second), at times many
# minutes later (a graph compiled in the background while its calls run in
# PyTorch), so the looks go on, every 30 s after the first ten minutes,
# until it is found. A look is a 20 ms sample of a few /proc files.
def _pauses() -> Iterator[float]:
    return itertools.chain(
        (0.02,) * 50, (0.25,) * 40, (5.0,) * 120, itertools.repeat(30.0)
    )


def _supported() -> bool:
    return hasattr(os, "SCHED_IDLE") and os.path.isdir("/proc/self/task")


def _wakes(tid: int) -> int | None:
    status = read_task_file(tid, "status")
    if status is None:
        return None
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return None


def _in_timed_wait(tid: int) -> bool:
    """Whether ``tid`` sleeps in a timed private futex wait right now."""
    fields = (read_task_file(tid, "syscall") or "").split()
    if len(fields) < 5 or fields[0] not in _FUTEX_SYSCALLS:
        return False
    return int(fields[2], 16) == _TIMED_WAIT_OP and int(fields[4], 16) != 0


def _candidates() -> list[int]:
    """Native threads of this process that are neither Python's nor MAX's
    workers, nor the main thread."""
    python = {t.native_id for t in threading.enumerate()}
    python.add(os.getpid())
    found = []
    for tid in thread_ids():
        if tid not in python and not is_max_worker(tid):
            found.append(tid)
    return found


def find_pollers() -> list[int]:
    """The threads that behave as MAX's poller: at least a thousand wakes a
    second over a short sample, seen sleeping in a timed futex wait."""
    tids = _candidates()
    before = {tid: _wakes(tid) for tid in tids}
    timed = {tid: False for tid in tids}
    deadline = time.monotonic() + _SAMPLE_S
    while time.monotonic() < deadline:
        for tid in tids:
            timed[tid] = timed[tid] or _in_timed_wait(tid)
        time.sleep(_SAMPLE_S / 8)
    pollers = []
    for tid in tids:
        start, end = before[tid], _wakes(tid)
        if start is None or end is None or not timed[tid]:
            continue
        if (end - start) / _SAMPLE_S >= _MIN_WAKES_PER_S:
            pollers.append(tid)
    return pollers


def _idle(tids: list[int]) -> list[int]:
    done = []
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        except OSError as error:
            _log.info("torch-max-backend: MAX's poller %d left as is: %s", tid, error)
            continue
        done.append(tid)
    return done


def search(
    sleep: Callable[[float], None] = time.sleep,
    find: Callable[[], list[int]] = find_pollers,
) -> list[int]:
    """Look for the poller after each of ``_pauses()`` until it is found."""
    for pause in _pauses():
        sleep(pause)
        pollers = find()
        if pollers:
            return pollers
    return []


def _record(pollers: list[int]) -> None:
    """``pollers``, found by the search or by a timing's own look, idled and
    kept; the first to find them ends the waiting."""
    with _lock:
        if _found.is_set():
            return
        _idled.extend(_idle(pollers))
        if _idled:  # else _idle said why
            _log.info(
                "torch-max-backend: MAX's polling thread %s now runs only on "
                "idle cores (SCHED_IDLE)",
                _idled,
            )
        _found.set()


def _look() -> None:
    _record(search())


def idle_poller() -> bool:
    """Once per process, from the first CPU graph's compile on: find MAX's
    polling thread when it starts and give it ``SCHED_IDLE``. Returns whether
    a search runs (or ran); the search itself is a daemon thread."""
    global _started
    with _lock:
        if _started:
            return True
        if not _supported():
            return False
        _started = True
    threading.Thread(
        target=_look, name="torch-max-backend-max-poller", daemon=True
    ).start()
    return True


def idle_for_timing() -> None:
    """Before product or convolution forms are timed (their first executes
    have started MAX's runtime, and with it the poller): the search started,
    and the poller looked for here and now (the search may be in one of its
    long pauses), once per process and for up to ``TIMING_WAIT_S``, so that
    the forms are timed as the graphs' calls will run. If nothing is found
    in that time the search goes on; later timings do not wait for it."""
    global _timing_waited
    if not idle_poller() or _timing_waited or _found.is_set():
        return
    _timing_waited = True
    deadline = time.monotonic() + TIMING_WAIT_S
    while not _found.is_set() and time.monotonic() < deadline:
        pollers = find_pollers()
        if pollers:
            _record(pollers)
    if not _found.is_set():
        _log.info(
            "torch-max-backend: products timed before MAX's polling thread "
            "was found (%.1f s)",
            TIMING_WAIT_S,
        )


def idled(timeout: float | None = None) -> list[int]:
    """The threads given ``SCHED_IDLE`` (waiting up to ``timeout`` for the
    search to end)."""
    _found.wait(timeout)
    return list(_idled)
