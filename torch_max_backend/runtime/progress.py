"""A progress line on stderr while MAX compiles a graph.

A cold compile can take a minute; without a sign of life users assume a hang.
The line appears only after ``delay`` seconds (a cached graph loads quicker
than that), updates in place once a second, and is written only when stderr
is a terminal, or always when ``verbose``, so logs and CI output stay clean.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, runtime_checkable


@runtime_checkable
class Stream(Protocol):
    """What the line is written to: sys.stderr or any text stream."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


def wanted(verbose: bool, stream: Stream | None = None) -> bool:
    stream = stream or sys.stderr
    return verbose or bool(getattr(stream, "isatty", lambda: False)())


@contextmanager
def compile_progress(
    label: str,
    *,
    enabled: bool,
    delay: float = 2.0,
    interval: float = 1.0,
    stream: Stream | None = None,
) -> Iterator[None]:
    """Show ``torch-max-backend: compiling <label>... Ns`` until the block ends."""
    if not enabled:
        yield
        return
    out = stream or sys.stderr
    done = threading.Event()
    start = time.perf_counter()
    shown = False

    def tick() -> None:
        nonlocal shown
        if done.wait(delay):
            return
        while True:
            elapsed = time.perf_counter() - start
            out.write(f"\rtorch-max-backend: compiling {label}... {elapsed:.0f}s")
            out.flush()
            shown = True
            if done.wait(interval):
                return

    thread = threading.Thread(target=tick, name="max-compile-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown:
            elapsed = time.perf_counter() - start
            out.write(f"\rtorch-max-backend: compiled {label} in {elapsed:.1f}s\n")
            out.flush()


class BackgroundProgress:
    """``torch-max-backend: N graph(s) compiling in the background...``.

    Shown while background compiles are pending (same rules as
    ``compile_progress``: a terminal, or ``verbose``), once a second, and
    closed with a line once every one has finished.
    """

    def __init__(
        self,
        pending: Callable[[], int],
        *,
        interval: float = 1.0,
        stream: Stream | None = None,
    ) -> None:
        self._pending = pending
        self._interval = interval
        self._stream = stream
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, verbose: bool) -> None:
        """Show the line until nothing is pending, unless it shows already."""
        out = self._stream or sys.stderr
        if not wanted(verbose, out):
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._tick,
                args=(out,),
                name="max-background-progress",
                daemon=True,
            )
            self._thread.start()

    def _tick(self, out: Stream) -> None:
        start = time.perf_counter()
        while (pending := self._pending()) > 0:
            elapsed = time.perf_counter() - start
            out.write(
                f"\rtorch-max-backend: {pending} graph(s) compiling in the "
                f"background, running in PyTorch meanwhile... {elapsed:.0f}s"
            )
            out.flush()
            time.sleep(self._interval)
        elapsed = time.perf_counter() - start
        out.write(
            f"\rtorch-max-backend: background compiles finished in {elapsed:.1f}s\n"
        )
        out.flush()
