"""Large CPU weights moved onto 2 MiB pages, in place, off the caller's thread.

A decode step reads every weight once, so its speed is the speed at which
weights stream from memory. torch allocates on 4 KiB pages (unless
``THP_MEM_ALLOC_ENABLE=1`` was set before the model was built), and
streaming hundreds of megabytes through 4 KiB pages misses the TLB every
4 KiB: GPT-2 small's 48 Conv1D products read their torch-allocated weights
20-35 % slower than the same weights on 2 MiB pages (AMD EPYC Zen 4,
2026-11-28). Linux 6.1's ``MADV_COLLAPSE`` moves memory already in use
onto huge pages, contents and addresses unchanged, so a model built before
``torch.compile`` gets them too, and so does eager PyTorch on the same
weights.

Best effort: a kernel without ``MADV_COLLAPSE``, a range it refuses, or a
machine out of free huge pages leaves the memory as it was. The pages at a
weight's ends are whole huge pages around it, so their other bytes (mostly
other weights) move too; GPT-2 small's resident memory stayed 858 MiB. Each range is
asked for once (a bounded table); the work runs on one daemon thread, so a
first call never waits for it. ``Settings.huge_pages`` switches it off.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import queue
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import torch

_log = logging.getLogger("torch_max_backend.runtime.huge_pages")

HUGE_PAGE = 2 << 20
# include/uapi/asm-generic/mman-common.h (Linux 6.1)
_MADV_COLLAPSE = 25
# Ranges already asked for, oldest first; bounded like every process table.
_ASKED_LIMIT = 4096

_lock = threading.Lock()
_enabled = True


def _kernel_has_collapse() -> bool:
    """Linux 6.1 or later: MADV_COLLAPSE is known."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        major, minor = (int(p) for p in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (6, 1)


_supported = _kernel_has_collapse()
_asked: OrderedDict[tuple[int, int], None] = OrderedDict()
_pending: queue.Queue[tuple[int, int]] = queue.Queue()
_worker: threading.Thread | None = None
# Bytes the kernel moved onto huge pages, for diagnostics and tests.
collapsed_bytes = 0


def set_enabled(enabled: bool) -> None:
    """Switch the requests on or off (process-wide; the latest compile sets it)."""
    global _enabled
    _enabled = enabled


def request(tensor: torch.Tensor) -> None:
    """Ask for ``tensor``'s memory on huge pages, if it spans at least one.

    Returns at once; the kernel works on the memory in the background.
    """
    if not _enabled or not _supported or tensor.device.type != "cpu":
        return
    size = tensor.numel() * tensor.element_size()
    if size < HUGE_PAGE:
        return
    start = tensor.data_ptr()
    span = (start, start + size)
    with _lock:
        if span in _asked:
            return
        _asked[span] = None
        while len(_asked) > _ASKED_LIMIT:
            _asked.popitem(last=False)
        _start_worker()
    _pending.put(span)


def wait() -> None:
    """Block until every request so far has been handled."""
    _pending.join()


def _start_worker() -> None:
    global _worker
    if _worker is None or not _worker.is_alive():
        _worker = threading.Thread(
            target=_serve, name="torch-max-backend-huge-pages", daemon=True
        )
        _worker.start()


def _serve() -> None:
    while True:
        start, end = _pending.get()
        try:
            _collapse(start, end)
        except Exception:  # a hint that failed must not end the thread
            _log.debug("huge pages for %#x-%#x failed", start, end, exc_info=True)
        finally:
            _pending.task_done()


@functools.cache
def _madvise() -> Callable[[int, int, int], int]:
    libc = ctypes.CDLL(None, use_errno=True)
    function = libc.madvise
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def _collapse(start: int, end: int) -> None:
    """Collapse the huge pages covering [start, end): the whole pages around
    the range first (their other bytes keep their contents too), the pages
    inside it when those around it are not all mapped alike."""
    global collapsed_bytes
    madvise = _madvise()
    outer = (start // HUGE_PAGE * HUGE_PAGE, -(-end // HUGE_PAGE) * HUGE_PAGE)
    inner = (-(-start // HUGE_PAGE) * HUGE_PAGE, end // HUGE_PAGE * HUGE_PAGE)
    began = time.perf_counter()
    code = 0
    for low, high in (outer, inner):
        if high <= low:
            continue
        # ctypes lets go of the GIL for the call: the kernel copies pages
        # while Python threads run.
        if madvise(low, high - low, _MADV_COLLAPSE) == 0:
            collapsed_bytes += high - low
            _log.debug(
                "%.1f MiB moved onto huge pages in %.3fs",
                (high - low) / 2**20,
                time.perf_counter() - began,
            )
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOMEM):
            break  # EAGAIN and the like: no free huge page now
    _log.debug(
        "huge pages for %#x-%#x refused: %s",
        start,
        end,
        errno.errorcode.get(code, code),
    )
