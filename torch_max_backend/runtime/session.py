"""One InferenceSession per device, and compiled models cached by graph text.

A structure seen before in this process costs nothing to "compile" again (an
in-process table); one compiled by an earlier process is read back from the
artifact we saved (storage/artifacts.py), else MAX's compiler (in a worker
process, compile_workers.py) answers from its own disk cache.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import torch
from max.engine import InferenceSession, Model
from max.engine.api import CompiledModel
from max.graph import Graph

from .. import logs
from ..storage.artifacts import artifact_path, read_artifact, write_artifact
from ..storage.cache_dir import cache_root, own_cache_dir
from . import stats
from .compile_workers import copy_outcome, start_compile
from .devices import max_device
from .model_table import BoundedLog, Hold, ModelTable
from .module_batch import ModuleMember, alone, member_name, start_gathered


@dataclass
class CompileRecord:
    # (graph key, device): the model table's key; see ``hold``.
    key: tuple[str, str]
    seconds: float
    cached: bool  # found loaded in this process
    from_disk: bool = False  # loaded from MAX's disk cache, not compiled
    # Mojo kernel libraries the graph loads (custom kernels), if any.
    kernel_libraries: tuple[str, ...] = ()
    # time.perf_counter() when the compile was asked for: compiles that
    # overlap ran side by side (compile_workers.py).
    started: float = 0.0
    # Where the compiled graph is saved (storage/artifacts.py).
    artifact: Path | None = None


_LOCK = threading.Lock()
# (graph key, device) -> loaded model; bounded (model_table.py).
MODELS: ModelTable[Model] = ModelTable()
# (graph key, device) -> its load under way, shared by concurrent requests.
_LOADING: dict[tuple[str, str], Future[tuple[Model, bool]]] = {}
COMPILE_LOG: BoundedLog[CompileRecord] = BoundedLog()


@functools.cache
def session_for(device: torch.device) -> InferenceSession:
    return InferenceSession(devices=[max_device(device)])


def graph_key(text: str) -> str:
    """The in-process table's key for a graph, from its text."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_CACHE_NAME = "<torch-max-backend cache>"


def portable_text(text: str) -> str:
    """``text`` with this machine's cache directory replaced by a name: the
    Mojo kernel libraries a graph loads are built there, and the same graph
    on another machine (a bundle unpacked there, another user) must find the
    same saved artifact."""
    return text.replace(str(own_cache_dir()), _CACHE_NAME)


def local_text(portable: str) -> str:
    """``portable_text``'s reverse: the name replaced by this machine's cache."""
    return portable.replace(_CACHE_NAME, str(own_cache_dir()))


_CORRUPT = re.compile(r"corrupted file: .*? for file '([^']+)'")


def _corrupt_cache_file(error: BaseException) -> Path | None:
    """The MAX cache file an error blames as corrupt, if it lies in MAX's cache."""
    seen: BaseException | None = error
    while seen is not None:
        match = _CORRUPT.search(str(seen))
        if match:
            path = Path(match.group(1))
            root = cache_root().resolve()
            if path.resolve().is_relative_to(root):
                return path
            return None
        seen = seen.__cause__ or seen.__context__
    return None


def _compile_healing_cache(
    session: InferenceSession,
    graph: Graph,
    device: torch.device,
    first: Callable[[], Future] | None = None,
) -> Future[CompiledModel]:
    """A compile of ``graph``, started again once when MAX finds its cached
    artifact corrupt.

    MAX verifies a cached artifact's hash and fails the compile when it does
    not match (a truncated write, a disk error); it does not recompile by
    itself. The blamed file is removed and the graph compiled afresh, once.
    """
    healed: Future[CompiledModel] = Future()

    def retry(done: Future[CompiledModel]) -> None:
        error = done.exception()
        path = None if error is None else _corrupt_cache_file(error)
        if path is None:
            copy_outcome(done, healed)
            return
        logs.warn(
            f"torch-max-backend: MAX's cache entry {path} is corrupt; "
            "removing it and compiling the graph again",
            RuntimeWarning,
            logger="cache",
            stacklevel=2,
        )
        path.unlink(missing_ok=True)
        start_compile(session, graph, device).add_done_callback(
            lambda again: copy_outcome(again, healed)
        )

    attempt = first() if first is not None else start_compile(session, graph, device)
    attempt.add_done_callback(retry)
    return healed


def _artifact_count() -> int:
    """Compiled graphs in MAX's disk cache (one file each)."""
    root = cache_root() / ".max_cache"
    return sum(1 for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def _start_load(
    session: InferenceSession,
    graph: Graph,
    text: str,
    key: str,
    path: Path,
    device: torch.device,
) -> Future[tuple[Model, bool]]:
    """The model of ``graph`` (whose text is ``text``, key ``key`` and saved
    artifact ``path``), and whether it came from a disk cache.

    Our saved artifact first (milliseconds, read here), else MAX's compiler
    (a worker process, or this process off the caller's thread), which itself
    answers from its disk cache when it compiled the graph before.
    """
    loaded: Future[tuple[Model, bool]] = Future()
    model = read_artifact(session, path, member_name(key))
    if model is not None:
        loaded.set_result((model, True))
        return loaded
    # MAX does not say whether it compiled or loaded; a load writes no new
    # artifact. (Another compile at the same time can make a load look like
    # a compile, never the reverse.)
    before = _artifact_count()

    def init(done: Future[CompiledModel]) -> None:
        try:
            compiled = done.result()
            from_disk = _artifact_count() == before
            if isinstance(compiled, ModuleMember):  # compiled with others
                write_artifact(compiled.compiled, path)
                model = compiled.init(session)
            else:
                write_artifact(compiled, path)
                model = session.init(compiled)
            loaded.set_result((model, from_disk))
        except BaseException as e:
            loaded.set_exception(e)

    _compile_healing_cache(
        session,
        graph,
        device,
        lambda: start_gathered(session, graph, text, device, key),
    ).add_done_callback(init)
    return loaded


def compile_graph(
    graph: Graph, device: torch.device, *, keep: int | None = None
) -> tuple[Model, CompileRecord, Hold]:
    """The loaded MAX model of ``graph``; see ``compile_graph_async``."""
    with alone():  # waited for at once: never held for a gathering
        compiling = compile_graph_async(graph, device, keep=keep)
    return compiling.result()


def compile_graph_async(
    graph: Graph, device: torch.device, *, keep: int | None = None
) -> Future[tuple[Model, CompileRecord, Hold]]:
    """The loaded MAX model of ``graph``, compiled at most once per process
    while it stays in the table of ``keep`` most recently used models.

    Returns at once; the compile runs in a worker process or off the
    caller's thread (compile_workers.py). Two requests for one graph share
    its compile. The ``Hold`` keeps the model in that table while it lives:
    the caller keeps it as long as it may run the model.
    """
    text = str(graph)  # a few ms for a large graph: once per compile
    portable = portable_text(text)
    key = graph_key(portable)
    path = artifact_path(portable, str(device))
    cache_key = (key, str(device))
    libraries = tuple(str(p) for p in graph.kernel_libraries_paths)
    start = time.perf_counter()
    result: Future[tuple[Model, CompileRecord, Hold]] = Future()
    with _LOCK:
        if keep is not None:
            MODELS.resize(keep)
            COMPILE_LOG.resize(keep)
        loading = _LOADING.get(cache_key)
        first = loading is None and MODELS.get(cache_key) is None
        if first:
            loading = _start_load(session_for(device), graph, text, key, path, device)
            _LOADING[cache_key] = loading

    def finish(done: Future[tuple[Model, bool]] | None) -> None:
        try:
            with _LOCK:
                if first:
                    _LOADING.pop(cache_key, None)
                found = done.result() if done is not None else None
                model = MODELS.get(cache_key)
                if model is None:
                    if found is None:  # evicted meanwhile: load it again
                        found = _start_load(
                            session_for(device), graph, text, key, path, device
                        ).result()
                    model = found[0]
                    MODELS.put(cache_key, model, held=True)
                    token = MODELS.hold(cache_key, already_counted=True)
                else:
                    token = MODELS.hold(cache_key)
            from_disk = bool(found and found[1])
            record = CompileRecord(
                cache_key,
                time.perf_counter() - start,
                not first,
                from_disk,
                libraries,
                start,
                path,
            )
            COMPILE_LOG.append(record)
            if first:
                stats.record(
                    max_compiles=1,
                    disk_cache_hits=int(from_disk),
                    kernel_graphs=int(bool(libraries)),
                    compile_seconds=record.seconds,
                )
            else:
                stats.record(cache_hits=1)
            result.set_result((model, record, token))
        except BaseException as e:
            result.set_exception(e)

    if loading is None:
        finish(None)
    else:
        loading.add_done_callback(finish)
    return result


def load_saved(
    key: str,
    path: Path,
    device: torch.device,
    libraries: tuple[str, ...] = (),
    *,
    keep: int | None = None,
) -> tuple[Model, CompileRecord, Hold] | None:
    """The model of the graph whose key is ``key`` (and which loads the Mojo
    kernel ``libraries``), from this process's table or the artifact at
    ``path``, without its MAX graph: None when neither has it (the caller
    then builds and compiles the graph)."""
    cache_key = (key, str(device))
    start = time.perf_counter()
    with _LOCK:
        if keep is not None:
            MODELS.resize(keep)
            COMPILE_LOG.resize(keep)
        loaded = MODELS.get(cache_key)
        if loaded is not None:
            token = MODELS.hold(cache_key)
            record = CompileRecord(cache_key, 0.0, True, False, libraries, start, path)
            COMPILE_LOG.append(record)
            stats.record(cache_hits=1)
            return loaded, record, token
    model = read_artifact(session_for(device), path, member_name(key))
    if model is None:
        return None
    with _LOCK:
        if MODELS.get(cache_key) is None:
            MODELS.put(cache_key, model, held=True)
            token = MODELS.hold(cache_key, already_counted=True)
        else:  # loaded meanwhile by another thread: share that one
            model = MODELS.get(cache_key)
            token = MODELS.hold(cache_key)
    seconds = time.perf_counter() - start
    record = CompileRecord(cache_key, seconds, False, True, libraries, start, path)
    COMPILE_LOG.append(record)
    stats.record(
        max_compiles=1,
        disk_cache_hits=1,
        kernel_graphs=int(bool(libraries)),
        compile_seconds=seconds,
    )
    return model, record, token
