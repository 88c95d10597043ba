"""Background compilation: a graph runs in PyTorch until its MAX graph is ready.

With ``background_compile``, the callable AOTAutograd receives for an ATen
graph is a ``GraphSwitch``. Until the graph's MAX version is loaded, its
calls run the ATen graph itself in PyTorch (what ``aot_eager`` runs), while a
builder thread lowers a copy of the graph and MAX compiles it (in a worker
process when there are several, compile_workers.py). The switch is one
attribute swap: no recompile, no new guard, and no call ever waits for it.

A graph that cannot be compiled stays on PyTorch and warns once, at its next
call; with ``strict`` the error is raised by its next call and by
``wait_compiled``. Warnings the build gives (a split graph, a cache entry
removed) are kept and given again on the caller's thread at that same call.
"""

from __future__ import annotations

import concurrent.futures
import copy
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import no_type_check

import torch
from torch._functorch.aot_autograd import make_boxed_func

from . import logs
from .errors import MaxCompilerError, first_line
from .fallback import FallbackWarning
from .runtime import stats
from .runtime.compile_workers import track, worker_count
from .runtime.progress import BackgroundProgress

Boxed = Callable[[list], list]

_logger = logs.get_logger("compile")
_lock = threading.Lock()
_builders: ThreadPoolExecutor | None = None
_jobs: set[Future] = set()
# Failures of strict graphs not yet raised by wait_compiled.
_strict_failures: list[BaseException] = []
_progress = BackgroundProgress(lambda: stats.compile_stats().pending)


class GraphSwitch:
    """Runs an ATen graph in PyTorch until its MAX graph replaces it.

    Its calls are the per-call path: exempt from runtime type checks.
    """

    def __init__(self, name: str, eager: Boxed) -> None:
        # An instance attribute: Dynamo's wrappers copy the instance dict and
        # AOTAutograd looks for this flag on them.
        self._boxed_call = True
        self.name = name
        self._eager = eager
        self._notes: list[tuple[str, type[Warning]]] = []
        self._error: BaseException | None = None
        self.compiled: Boxed | None = None
        self._run: Boxed = self._while_compiling

    @no_type_check
    def __call__(self, args: list) -> list:
        return self._run(args)

    @no_type_check
    def _while_compiling(self, args: list) -> list:
        stats.record(eager_calls=1)
        return self._eager(args)

    def switch_to(
        self, compiled: Boxed, notes: list[tuple[str, type[Warning]]]
    ) -> None:
        """From the builder thread: later calls run ``compiled``."""
        self.compiled = compiled
        self._notes = notes
        self._run = self._first_compiled_call if notes else compiled

    def fail(
        self,
        error: BaseException,
        notes: list[tuple[str, type[Warning]]],
        strict: bool,
    ) -> None:
        """From the builder thread: the graph stays on PyTorch (or, strict, raises)."""
        self._error = error
        if strict:
            self._notes = notes
            self._run = self._raise
            return
        self._notes = [
            *notes,
            (
                f"torch-max-backend: graph {self.name} runs in PyTorch: its "
                f"background compile failed: {type(error).__name__}: "
                f"{first_line(error)} Pass options={{'strict': True}} to raise "
                "instead.",
                FallbackWarning,
            ),
        ]
        self._run = self._first_failed_call

    def _give_notes(self) -> None:
        notes, self._notes = self._notes, []
        for message, category in notes:
            # The user's frame lies behind a varying number of Dynamo and
            # AOTAutograd wrappers; this line is at least a stable place.
            warnings.warn(message, category, stacklevel=2)

    @no_type_check
    def _first_compiled_call(self, args: list) -> list:
        assert self.compiled is not None
        self._run = self.compiled
        self._give_notes()
        return self.compiled(args)

    @no_type_check
    def _first_failed_call(self, args: list) -> list:
        self._run = self._eager
        self._give_notes()
        return self._eager(args)

    @no_type_check
    def _raise(self, args: list) -> list:
        self._give_notes()
        assert self._error is not None
        raise self._error


def compile_in_background(
    name: str,
    gm: torch.fx.GraphModule,
    compile_copy: Callable[[torch.fx.GraphModule], Boxed],
    *,
    strict: bool,
    verbose: bool,
) -> GraphSwitch:
    """A ``GraphSwitch`` for ``gm`` whose MAX side ``compile_copy`` makes, on
    a builder thread, from a copy of ``gm`` (the copy may be split in place
    while ``gm`` keeps running in PyTorch)."""
    copied = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    switch = GraphSwitch(name, make_boxed_func(gm.forward))
    stats.add_pending(1)
    start = time.perf_counter()

    def job() -> None:
        try:
            with logs.collect_warnings() as notes:
                try:
                    compiled = compile_copy(copied)
                except Exception as e:
                    error = _as_compiler_error(name, e)
                    _logger.warning(
                        "torch-max-backend: background compile of graph %s failed: %s",
                        name,
                        first_line(error),
                    )
                    if strict:
                        with _lock:
                            _strict_failures.append(error)
                    switch.fail(error, notes, strict)
                    return
            switch.switch_to(compiled, notes)
            _logger.info(
                "torch-max-backend: graph %s runs on MAX after %.1fs in PyTorch",
                name,
                time.perf_counter() - start,
            )
        finally:
            stats.add_pending(-1)

    future = _builder_pool().submit(job)
    with _lock:
        _jobs.add(future)
    future.add_done_callback(_job_done)
    track(future)
    _progress.start(verbose)
    return switch


def _as_compiler_error(name: str, error: BaseException) -> BaseException:
    if isinstance(error, MaxCompilerError):
        return error
    wrapped = MaxCompilerError(
        f"the background compile of graph {name} failed: "
        f"{type(error).__name__}: {error}"
    )
    wrapped.__cause__ = error
    return wrapped


def _builder_pool() -> ThreadPoolExecutor:
    global _builders
    with _lock:
        if _builders is None:
            # A thread per compile worker, so that each can wait on its
            # worker; building itself is serialized (backend.py).
            _builders = ThreadPoolExecutor(
                max(2, worker_count()), thread_name_prefix="max-build"
            )
        return _builders


def _job_done(future: Future) -> None:
    with _lock:
        _jobs.discard(future)


def wait_compiled(timeout: float | None = None) -> bool:
    """Block until every background compile started so far has finished.

    Returns False when ``timeout`` seconds passed first. A compile that
    failed under ``strict`` is raised here (once), as by its graph's next call.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _lock:
            jobs = list(_jobs)
        if not jobs:
            break
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        _, unfinished = concurrent.futures.wait(jobs, timeout=left)
        if unfinished:
            return False
    with _lock:
        failures = list(_strict_failures)
        _strict_failures.clear()
    if failures:
        raise failures[0]
    return True
