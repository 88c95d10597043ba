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
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import no_type_check

import torch
from torch._functorch.aot_autograd import make_boxed_func

from .. import logs
from ..errors import MaxCompilerError, first_line
from ..runtime import stats
from ..runtime.compile_workers import track, worker_count
from ..runtime.module_batch import gathered
from ..runtime.progress import BackgroundProgress
from .fallback import FallbackWarning
from .handoff import keep_eager_layouts
from .product_upgrade import unfinished_upgrades

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
        # Set once a call has run in PyTorch: building the MAX graph waits
        # for it (see _compile_batch).
        self.called = threading.Event()

    @no_type_check
    def __call__(self, args: list) -> list:
        return self._run(args)

    @no_type_check
    def _while_compiling(self, args: list) -> list:
        stats.record(eager_calls=1)
        try:
            return self._eager(args)
        finally:
            self.called.set()

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


Finish = Callable[[], Boxed]


@dataclass
class _Pending:
    """A graph waiting for its background compile."""

    name: str
    switch: GraphSwitch
    copied: torch.fx.GraphModule
    start_compile: Callable[[torch.fx.GraphModule], Finish]
    strict: bool
    asked: float  # time.perf_counter() when it was handed to us
    # Given the graph's first-call event, returns when its build may start.
    after: Callable[[threading.Event], None]


_batch = threading.local()
# Seconds a background build waits at most for its graph's first call.
FIRST_CALL_WAIT = 10.0


@contextmanager
def compiled_together() -> Iterator[None]:
    """The graphs handed to ``compile_in_background`` inside this block (a
    training step's forward and backward) start compiling together at its
    end (runtime/module_batch.py)."""
    if getattr(_batch, "pending", None) is not None:
        yield
        return
    _batch.pending = []
    try:
        yield
    finally:
        pending, _batch.pending = _batch.pending, None
        if pending:
            _submit(pending)


def compile_in_background(
    name: str,
    gm: torch.fx.GraphModule,
    start_compile: Callable[[torch.fx.GraphModule], Finish],
    *,
    strict: bool,
    verbose: bool,
    after: Callable[[threading.Event], None] | None = None,
) -> GraphSwitch:
    """A ``GraphSwitch`` for ``gm`` whose MAX side is compiled on a builder
    thread from a copy of ``gm`` (the copy may be split in place while ``gm``
    keeps running in PyTorch): ``start_compile(copy)`` builds it and starts
    its compile, and the function it returns waits for the compile. The
    builder thread first calls ``after`` with the switch's first-call event,
    which returns when the build may start (a step's backward: at its first
    call, deferred.py's ``backward_turn``)."""
    copied = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    # Its inputs may come from MAX (a backward's saved tensors, from a
    # forward already on MAX), contiguous where eager's were strided: the
    # ops that read storage through strides get eager's layout.
    if keep_eager_layouts(gm):
        gm.recompile()
    switch = GraphSwitch(name, make_boxed_func(gm.forward))
    stats.add_pending(1)
    pending = _Pending(
        name,
        switch,
        copied,
        start_compile,
        strict,
        time.perf_counter(),
        after or (lambda called: None),
    )
    batch = getattr(_batch, "pending", None)
    if batch is not None:
        batch.append(pending)
    else:
        _submit([pending])
    _progress.start(verbose)
    return switch


def _submit(batch: list[_Pending]) -> None:
    future = _builder_pool().submit(_compile_batch, batch)
    with _lock:
        _jobs.add(future)
    future.add_done_callback(_job_done)
    track(future)


def _compile_batch(batch: list[_Pending]) -> None:
    """Build every graph of ``batch`` and start their compiles together, then
    switch each to MAX (or fail it) as its compile ends."""
    # Building is Python work that holds the GIL: started at once, it slows
    # the call that Dynamo compiled for by as long as it takes (0.3-0.5 s
    # for a BERT-base here), so it starts when that first call has returned.
    for pending in batch:
        pending.after(pending.switch.called)
    batch[0].switch.called.wait(FIRST_CALL_WAIT)
    started: list[tuple[_Pending, Finish | None, list]] = []
    with gathered():
        for pending in batch:
            with logs.collect_warnings() as notes:
                try:
                    finish: Finish | None = pending.start_compile(pending.copied)
                except Exception as e:
                    _fail(pending, e, notes)
                    finish = None
            started.append((pending, finish, notes))
    for pending, finish, notes in started:
        if finish is None:
            continue
        with logs.collect_warnings() as more:
            try:
                compiled = finish()
            except Exception as e:
                _fail(pending, e, notes + more)
                continue
        try:
            pending.switch.switch_to(compiled, notes + more)
            _logger.info(
                "torch-max-backend: graph %s runs on MAX after %.1fs in PyTorch",
                pending.name,
                time.perf_counter() - pending.asked,
            )
        finally:
            stats.add_pending(-1)


def _fail(pending: _Pending, error: Exception, notes: list) -> None:
    try:
        error = _as_compiler_error(pending.name, error)
        _logger.warning(
            "torch-max-backend: background compile of graph %s failed: %s",
            pending.name,
            first_line(error),
        )
        if pending.strict:
            with _lock:
                _strict_failures.append(error)
        pending.switch.fail(error, notes, pending.strict)
    finally:
        stats.add_pending(-1)


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
    """Block until every background compile started so far has finished,
    and every graph's upgrade to MAX's matmul (product_upgrade.py).

    Returns False when ``timeout`` seconds passed first. A compile that
    failed under ``strict`` is raised here (once), as by its graph's next call.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _lock:
            jobs: list[Future] = list(_jobs)
        jobs += unfinished_upgrades()
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
