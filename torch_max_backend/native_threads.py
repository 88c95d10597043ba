"""This process's native threads as Linux lists them, and which are MAX's
CPU workers. The runtime (which rests the workers between executes) and the
poller's idling (which must pass them over, and which the export runner uses
without torch) both ask; it reads /proc only."""

from __future__ import annotations

import os

# MAX names its CPU worker threads "🔥 Thread0", "🔥 Thread1", ...
_MAX_WORKER_PREFIX = "\U0001f525"


def thread_ids() -> list[int]:
    """The native ids of this process's threads (empty without /proc)."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []


def read_task_file(tid: int, name: str) -> str | None:
    """``/proc/self/task/<tid>/<name>``, or None once the thread has ended."""
    try:
        with open(f"/proc/self/task/{tid}/{name}") as f:
            return f.read()
    except OSError:
        return None


def is_max_worker(tid: int) -> bool:
    """Whether thread ``tid`` is one of MAX's CPU workers (by its name)."""
    return (read_task_file(tid, "comm") or "").startswith(_MAX_WORKER_PREFIX)
