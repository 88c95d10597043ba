"""Where MAX graphs compile: worker processes, or the calling process.

MAX's compiler runs one graph at a time per process (a lock in
``max/engine/api.py``) on one thread, and a cold compile costs 15-60 s and
1-2 GiB. Graphs ready at the same time (a step's forward and backward, the
blocks around a fallback, several models compiling in the background) are
therefore compiled in worker processes: they run side by side, and the
compiler's memory lives in the workers, not in the user's process. A worker
writes the compiled artifact to a file (MAX's ``ProcessCompilePool``); this
process only maps it.

The number of workers is process-wide and fixed by the first compile:
``compile_workers`` (``TORCH_MAX_BACKEND_COMPILE_WORKERS``), else one per
usable core (the process's affinity, not the machine's count) as far as
available memory allows 2 GiB a worker. With one worker, graphs compile in
this process, one at a time, as MAX does by itself. Graphs for accelerators
compile in this process too: workers compile for the CPU only here.

A process that exits normally first finishes the compiles it started (their
artifacts are saved for the next run), instead of discarding them.

Optional compiles (a product upgrade: the graph already runs without it)
run ``at_low_priority()``: in a worker of their own at the lowest CPU
priority, so that they never take a core from the graphs the caller runs.
On 2 cores an upgrade compiled at normal priority beside a training loop
made every graph of the step 2-3x slower for the minutes it took
(docs/benchmarks.md, "Training steps").
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextvars import ContextVar
from pathlib import Path

import torch
from max.engine import InferenceSession
from max.engine.api import CompiledModel
from max.graph import Graph, Module

from .. import logs

# What one compile worker may take at its peak (measured 1.6-2.4 GiB of
# resident memory for a cold compile of the suite's models).
WORKER_MEMORY = 2 * 2**30

logger = logs.get_logger("compile")

_lock = threading.Lock()
_workers: int | None = None
_in_process: ThreadPoolExecutor | None = None
_pool: object = None  # max.experimental.compile_pool.ProcessCompilePool
# The one-worker pool of optional compiles, its worker at LOW_PRIORITY.
_low_pool: object = None
# The nice value of that worker: the lowest priority POSIX gives.
LOW_PRIORITY = 19
_low_priority: ContextVar[bool] = ContextVar("max_low_priority", default=False)
_unfinished: set[Future] = set()
_exiting = False
_dropped_at_exit: ContextVar[bool] = ContextVar("max_dropped_at_exit", default=False)
_exit_hook_installed = False


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes this process could still take: the lower of the machine's
    available memory and the room left under a cgroup limit; None if unknown."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def default_workers() -> int:
    """One worker per usable core, as far as memory allows ``WORKER_MEMORY`` each."""
    cores = usable_cores()
    memory = available_memory()
    by_memory = cores if memory is None else memory // WORKER_MEMORY
    return max(1, min(cores, by_memory))


def worker_count(requested: int | None = None) -> int:
    """The process's number of compile workers; the first call fixes it."""
    global _workers
    with _lock:
        if _workers is None:
            _workers = requested or default_workers()
            logger.info("torch-max-backend: %d compile worker(s)", _workers)
        elif requested is not None and requested != _workers:
            logger.debug(
                "torch-max-backend: compile_workers=%d ignored: this process "
                "already compiles with %d",
                requested,
                _workers,
            )
        return _workers


def start_compile(
    session: InferenceSession, graph: Graph, device: torch.device
) -> Future[CompiledModel]:
    """Compile ``graph`` for ``device``: in a worker process when there are
    several workers and the device is the CPU, else in this process (one
    compile at a time, off the caller's thread)."""
    return _start(
        lambda pool: pool.compile(graph),  # type: ignore[attr-defined]
        lambda: session.compile(graph),
        device,
    )


def start_module_compile(
    session: InferenceSession,
    module: Module,
    kernel_libraries: list[Path],
    device: torch.device,
) -> Future[CompiledModel]:
    """Compile the graphs of ``module`` together, as ``start_compile`` does one."""
    return _start(
        lambda pool: pool.compile_module(  # type: ignore[attr-defined]
            module, custom_extensions=kernel_libraries
        ),
        lambda: session.compile(module, custom_extensions=kernel_libraries),
        device,
    )


def _start(
    in_worker: Callable[[object], Future[CompiledModel]],
    here: Callable[[], CompiledModel],
    device: torch.device,
) -> Future[CompiledModel]:
    workers = worker_count()
    if workers > 1 and device.type == "cpu":
        future = _in_worker(in_worker, workers, retry=True, low=_low_priority.get())
    else:
        future = _in_process_executor().submit(here)
    if not _dropped_at_exit.get():
        track(future)
    return future


@contextlib.contextmanager
def dropped_at_exit() -> Iterator[None]:
    """Compiles started inside are not finished before the process exits:
    nothing waits for them (pipeline/product_upgrade.py), so a script's exit does
    not wait a minute for one. Only a worker process's compile is dropped;
    one in this process runs to its end."""
    token = _dropped_at_exit.set(True)
    try:
        yield
    finally:
        _dropped_at_exit.reset(token)


@contextlib.contextmanager
def at_low_priority() -> Iterator[None]:
    """CPU compiles started inside run in the low-priority worker (see the
    module's docstring); where graphs compile in this process, as before."""
    token = _low_priority.set(True)
    try:
        yield
    finally:
        _low_priority.reset(token)


def _in_worker(
    submit: Callable[[object], Future[CompiledModel]],
    workers: int,
    *,
    retry: bool,
    low: bool = False,
) -> Future[CompiledModel]:
    """``submit(pool)``'s compile in the worker pool (the low-priority one if
    ``low``); a pool whose worker died (killed for memory, say) is replaced
    and the compile started again, once."""
    pool = _low_priority_pool() if low else _worker_pool(workers)
    try:
        first = submit(pool)
    except BrokenProcessPool:
        _drop_pool(pool)
        if not retry:
            raise
        return _in_worker(submit, workers, retry=False, low=low)
    if not retry:
        return first
    result: Future[CompiledModel] = Future()

    def settle(done: Future[CompiledModel]) -> None:
        error = done.exception()
        # At exit the pool is closed under the compiles nobody waits for.
        if isinstance(error, BrokenProcessPool) and not _exiting:
            logs.warn(
                "torch-max-backend: a compile worker died; compiling the graph "
                "again in a new worker",
                RuntimeWarning,
                logger="compile",
            )
            _drop_pool(pool)
            again = _in_worker(submit, workers, retry=False, low=low)
            again.add_done_callback(lambda d: copy_outcome(d, result))
        else:
            copy_outcome(done, result)

    first.add_done_callback(settle)
    return result


def copy_outcome(source: Future, target: Future) -> None:
    """Resolve ``target`` as ``source`` resolved."""
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


def _drop_pool(pool: object) -> None:
    global _pool, _low_pool
    with _lock:
        if _pool is pool:
            _pool = None
        if _low_pool is pool:
            _low_pool = None
    # Not here: this may run on the pool's own thread, which closing joins.
    threading.Thread(
        target=_close_quietly, args=(pool,), name="max-pool-close", daemon=True
    ).start()


def _close_quietly(pool: object) -> None:
    try:
        pool.close()  # type: ignore[attr-defined]
    except Exception as e:  # already broken; nothing more to free
        logger.debug("closing a broken compile pool: %s", e)


def _in_process_executor() -> ThreadPoolExecutor:
    global _in_process
    with _lock:
        if _in_process is None:
            _in_process = ThreadPoolExecutor(1, thread_name_prefix="max-compile")
        return _in_process


def _new_pool(workers: int) -> object:
    """A pool of ``workers`` CPU compile worker processes (MAX's)."""
    from max.driver import DeviceSpec
    from max.experimental.compile_pool import ProcessCompilePool

    return ProcessCompilePool(device_specs=[DeviceSpec.cpu()], max_workers=workers)


def _worker_pool(workers: int) -> object:
    global _pool
    with _lock:
        if _pool is None:
            _pool = _new_pool(workers)
            _install_exit_hook()
        return _pool


def _low_priority_pool() -> object:
    global _low_pool
    with _lock:
        if _low_pool is None:
            _low_pool = _new_pool(1)
            _lower_priority(_low_pool)
            # Exit hooks run last registered first: the pool closes under
            # its compile after this says so (no compile started again).
            threading._register_atexit(_mark_exiting)  # type: ignore[attr-defined]
        return _low_pool


def _mark_exiting() -> None:
    global _exiting
    _exiting = True


def _lower_priority(pool: object) -> None:
    """Lower the priority of ``pool``'s one worker, before any compile.

    The pool runs its work in order on that worker (a process pool of one),
    so ``os.nice`` submitted first runs there before the first compile. MAX's
    pool offers no initializer of ours: this reaches its executor, and where
    a later MAX moves it, the worker keeps normal priority (logged).
    """
    executor = getattr(pool, "_executor", None)
    if executor is None:
        logger.info("torch-max-backend: optional compiles run at normal priority")
        return

    def report(done: Future) -> None:
        error = done.exception()
        if error is not None:
            logger.info(
                "torch-max-backend: could not lower a worker's priority: %s", error
            )

    executor.submit(os.nice, LOW_PRIORITY).add_done_callback(report)


def track(future: Future) -> None:
    """Count ``future`` among the work a normal exit finishes first."""
    workers = worker_count()
    if workers > 1:
        _worker_pool(workers)  # its exit hook must come before ours
    with _lock:
        _install_exit_hook()
        _unfinished.add(future)
    future.add_done_callback(_forget)


def _forget(future: Future) -> None:
    with _lock:
        _unfinished.discard(future)


def _install_exit_hook() -> None:
    global _exit_hook_installed
    if not _exit_hook_installed:
        # Threading's exit hooks run when the main thread ends, last
        # registered first: this one runs before the worker pool's, which
        # discards unfinished compiles, and before executors stop.
        threading._register_atexit(_at_exit)  # type: ignore[attr-defined]
        _exit_hook_installed = True


def _at_exit() -> None:
    """Finish the tracked compiles; then the pool closes under the rest,
    which are not started again."""
    global _exiting
    finish_unfinished()
    _exiting = True


def finish_unfinished() -> None:
    """Wait until every tracked compile (and what it starts) has finished."""
    while True:
        with _lock:
            futures = list(_unfinished)
        if not futures:
            return
        logger.info(
            "torch-max-backend: finishing %d compile(s) before exiting", len(futures)
        )
        for future in futures:
            # A failure is reported by whoever waits on the future.
            with contextlib.suppress(BaseException):
                future.result()
