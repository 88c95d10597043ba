"""A graph whose compile is waited for at its first call, not when it is handed over.

AOTAutograd hands a training step's forward and backward to the backend one
after the other, in one call of ``max_backend``. Compiled together, as one
MAX module (runtime/module_batch.py), the pair costs far less than two
compiles (the benchmark MLP's step: 39 s against 63 s, AMD EPYC), but the
module can only start once both were handed over, so neither compiler call
may wait for its own graph: each returns this, which waits at the first
call (Dynamo calls the forward right after compiling it; the backward
waits at the first ``backward()``). Each stays pending in compile_stats()
until its module is compiled, whether or not it is ever called.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, no_type_check

from .background import FIRST_CALL_WAIT, Finish


class FirstCallWaits:
    """Boxed callable of a graph still compiling: the first call waits for
    the compile (``finish``), later calls go straight to its result."""

    def __init__(self, finish: Finish) -> None:
        # An instance attribute: wrappers (torch._dynamo.disable) copy the
        # instance's __dict__, which tells AOTAutograd to pass one list.
        self._boxed_call = True
        self._finish: Finish | None = finish
        self._compiled: Callable[[list], Any] | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def _wait(self) -> Callable[[list], Any]:
        with self._lock:
            if self._compiled is not None:
                return self._compiled
            if self._finish is None:  # the compile failed (strict): again
                assert self._error is not None
                raise self._error
            finish, self._finish = self._finish, None
            try:
                self._compiled = finish()
            except BaseException as e:
                self._error = e
                raise
            finally:
                # This graph's compile is over, and with it every graph its
                # module held: none of them is pending any more.
                settle_finished()
            return self._compiled

    @no_type_check  # every call of a training graph passes here
    def __call__(self, args: list) -> Any:
        compiled = self._compiled
        if compiled is None:
            compiled = self._wait()
        return compiled(args)


def once(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn``, run at its first call only (later calls do nothing)."""
    lock = threading.Lock()
    ran = False

    def call() -> None:
        nonlocal ran
        with lock:
            if ran:
                return
            ran = True
        fn()

    return call


# Callbacks of when_all_done whose futures are not all done yet. A future's
# done callbacks run after the threads waiting on it have woken, so a first
# call could return with its own finished compile still counted as pending
# (on an empty cache, often); settle_finished() runs them at once instead.
_unsettled: list[tuple[Sequence[Future], Callable[[], None]]] = []
_unsettled_lock = threading.Lock()


def when_all_done(futures: Sequence[Future], callback: Callable[[], None]) -> None:
    """Call ``callback`` once every one of ``futures`` is done (at once when
    there are none): a gathered graph's compile is over when its module's
    is, whether or not anything has called the graph yet."""
    remaining = len(futures)
    if not remaining:
        callback()
        return
    callback = once(callback)
    entry = (tuple(futures), callback)
    with _unsettled_lock:
        _unsettled.append(entry)
    lock = threading.Lock()

    def one_done(_: Future) -> None:
        nonlocal remaining
        with lock:
            remaining -= 1
            last = remaining == 0
        if last:
            _settle(entry)

    for future in futures:
        future.add_done_callback(one_done)


def settle_finished() -> None:
    """Run now the callbacks of when_all_done whose futures are all done."""
    with _unsettled_lock:
        ready = [e for e in _unsettled if all(f.done() for f in e[0])]
    for entry in ready:
        _settle(entry)


def _settle(entry: tuple[Sequence[Future], Callable[[], None]]) -> None:
    with _unsettled_lock:
        if entry in _unsettled:
            _unsettled.remove(entry)
    entry[1]()


# Training forwards' compiles in flight in this process (callers wait for
# them), and when the last one ended: a background backward does not start
# its own beside them (``backward_turn``).
_forwards_compiling = 0
_forwards_idle_since = 0.0
_forwards_lock = threading.Lock()
# Seconds between a waiting backward's looks at its first call.
_POLL_S = 0.25


def forwards_compiling() -> int:
    """How many training forwards' compiles are in flight in this process."""
    with _forwards_lock:
        return _forwards_compiling


def forward_compiling() -> Callable[[], None]:
    """Count a training forward's compile as in flight; the returned
    function, called once it is over, stops counting it."""
    global _forwards_compiling
    with _forwards_lock:
        _forwards_compiling += 1

    def finished() -> None:
        global _forwards_compiling, _forwards_idle_since
        with _forwards_lock:
            _forwards_compiling -= 1
            _forwards_idle_since = time.monotonic()

    return once(finished)


def _forwards_idle_for() -> float:
    """Seconds since the last forward's compile ended (0 while one runs)."""
    with _forwards_lock:
        if _forwards_compiling:
            return 0.0
        return time.monotonic() - _forwards_idle_since


def backward_turn(called: threading.Event) -> None:
    """Return when a background backward may start building
    (``background_compile="backward"``): at its first call (``called``),
    when the step's forwards have compiled and run; never called, once no
    forward has compiled for FIRST_CALL_WAIT seconds, nor has it waited less.

    So a step's first call, which waits for its forwards alone, has the
    cores to itself. MAX compiles a graph on about one core: two compiles
    side by side on 2 cores take about the time of each alone, but beside a
    second process's compile each gets half of what it would. A step split
    by a graph break hands over a second forward while the first backward
    waits, which is why a backward waits for every forward, not only its own."""
    deadline = time.monotonic() + FIRST_CALL_WAIT
    while not called.wait(_POLL_S):
        if time.monotonic() >= deadline and _forwards_idle_for() >= FIRST_CALL_WAIT:
            return
