"""MAX's CPU worker threads give way to the caller's Python between executes.

After a long execute MAX's workers do not go to sleep at once: they keep
running, mostly in a busy-wait loop reading the clock, for a time that grows
with the work they just did (about a tenth of it: 20 ms after 0.2 s of
back-to-back executes, 0.5 s after 5 s of them; MAX alone, no torch, Intel
Xeon, 2 cores). A decode loop calls a 10 ms graph every 15 ms, so the workers
never stop, and the Python between two calls (Dynamo's guards, generate()'s
loop, our call path) shares two cores with two spinning threads: measured
with ``/proc`` schedstat, the workers took 31 ms of CPU a step for 21 ms of
kernels, and the main thread's guard check took 2 ms of wall time for 0.7
ms of its own CPU (docs/benchmarks.md).

So, where the process may raise a thread's priority back (``CAP_SYS_NICE``,
or an ``RLIMIT_NICE`` that allows it; root on most hosts, not in a default
container), the workers rest at nice 19 after an execute of ``REST_AFTER_S``
(5 ms) or more and get their nice value back before the next execute
starts. Their spinning then takes only what the caller leaves; while MAX
computes they run as before. Shorter executes (a small model called in a
loop) change nothing, so that such calls pay no system call. Where raising
is not allowed nothing is done, since a worker lowered once could not be
raised again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, no_type_check

from .. import logs
from ..native_threads import is_max_worker, thread_ids

_log = logs.get_logger("runtime")

# The nice value of a resting worker: the lowest weight Linux gives, so that
# any other runnable thread of normal priority takes its core.
RESTING_NICE = 19
# An execute shorter than this leaves the workers as they are: after it they
# spin for little time, and resting them costs a loop of small graphs four
# system calls a call. Executes of 1-2.5 ms called back to back (the suite's
# MLP forward and its training step) ran 3-7 % slower rested after each, on
# an Intel Xeon; GPT-2's 20 ms decode step ran 4-8 % faster rested, the
# llama-style model's 6.5 ms one about as fast (docs/benchmarks.md).
REST_AFTER_S = 5e-3

_lock = threading.Lock()
_enabled = False
_checked = False
# One entry per execute in flight: list.append and list.pop are atomic, so a
# call takes the lock only to change the workers' priority, not at every
# execute (a lock taken and released after an execute, from cold caches,
# cost about 2 us of a small graph's call).
_in_flight: list[None] = []
_resting = False
# (thread id, its nice value when found) per MAX worker thread.
_workers: list[tuple[int, int]] = []


def _nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def may_raise_priority() -> bool:
    """Whether a thread of this process that lowered its priority may raise
    it back: tried on a thread of its own that exits after."""
    result: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        start = _nice_of(tid)
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(start + 1, RESTING_NICE))
            os.setpriority(os.PRIO_PROCESS, tid, start)
        except OSError:
            result.append(False)
            return
        result.append(_nice_of(tid) == start)

    thread = threading.Thread(target=probe, name="torch-max-backend-nice-probe")
    thread.start()
    thread.join()
    return bool(result and result[0])


def _supported() -> bool:
    return hasattr(os, "setpriority") and os.path.isdir("/proc/self/task")


def enable() -> bool:
    """From the first CPU graph's compile on, let MAX's workers rest between
    long executes, once per process where the priority can be raised back.
    Returns whether they do."""
    global _enabled, _checked
    with _lock:
        if not _checked:
            _checked = True
            _enabled = _supported() and may_raise_priority()
            if not _enabled:
                _log.info(
                    "torch-max-backend: MAX's workers keep their priority "
                    "between executes (this process may not raise a thread's "
                    "priority back)"
                )
        return _enabled


@no_type_check  # called at every CPU execute: no runtime type check
def enabled() -> bool:
    return _enabled


def _find_workers() -> list[tuple[int, int]]:
    found = []
    for tid in thread_ids():
        if is_max_worker(tid):
            try:
                found.append((tid, _nice_of(tid)))
            except OSError:  # the thread ended meanwhile
                continue
    return found


def _set_all(resting: bool) -> None:
    """Every worker at the resting nice value, or back at its own; a worker
    that ended is dropped."""
    global _resting
    gone = []
    for entry in _workers:
        tid, own = entry
        try:
            os.setpriority(
                os.PRIO_PROCESS, tid, max(own, RESTING_NICE) if resting else own
            )
        except OSError:
            gone.append(entry)
    for entry in gone:
        _workers.remove(entry)
    _resting = resting


@no_type_check  # called at every CPU execute: no runtime type check
def run(execute: Callable[[Any], Any], inputs: Any) -> Any:
    """``execute(inputs)`` with MAX's workers awake, resting after it if it
    took ``REST_AFTER_S`` or more and no other execute is in flight."""
    _in_flight.append(None)
    if _resting:
        with _lock:
            if _resting:
                _set_all(False)
    start = time.perf_counter()
    try:
        return execute(inputs)
    finally:
        long = time.perf_counter() - start >= REST_AFTER_S
        _in_flight.pop()
        if long:
            _rest_unless_busy()


def _rest_unless_busy() -> None:
    """The workers rest unless an execute is in flight. One that started
    while they were being lowered saw them awake, so they are raised again
    for it: a caller never executes with resting workers."""
    with _lock:
        if _in_flight:
            return
        if not _workers:
            _workers.extend(_find_workers())
        _set_all(True)
        if _in_flight:
            _set_all(False)


def workers() -> list[tuple[int, int]]:
    """The workers found so far: (thread id, own nice value)."""
    with _lock:
        return list(_workers)
