"""One InferenceSession per device, and compiled models cached by graph text.

A structure seen before in this process costs nothing to "compile" again (an
in-process table); one compiled by an earlier process is read back from the
artifact we saved (storage/artifacts.py), else MAX's compiler answers from its
own disk cache.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from max.engine import InferenceSession, Model
from max.engine.api import CompiledModel
from max.graph import Graph

from .. import logs
from ..storage.artifacts import artifact_path, read_artifact, write_artifact
from ..storage.cache_dir import cache_root
from . import stats
from .devices import max_device
from .model_table import BoundedLog, Hold, ModelTable


@dataclass
class CompileRecord:
    # (graph key, device): the model table's key; see ``hold``.
    key: tuple[str, str]
    seconds: float
    cached: bool  # found loaded in this process
    from_disk: bool = False  # loaded from MAX's disk cache, not compiled
    # Mojo kernel libraries the graph loads (custom kernels), if any.
    kernel_libraries: tuple[str, ...] = ()


_LOCK = threading.Lock()
# (graph key, device) -> loaded model; bounded (model_table.py).
MODELS: ModelTable[Model] = ModelTable()
COMPILE_LOG: BoundedLog[CompileRecord] = BoundedLog()


@functools.cache
def session_for(device: torch.device) -> InferenceSession:
    return InferenceSession(devices=[max_device(device)])


def graph_key(text: str) -> str:
    """The in-process table's key for a graph, from its text."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


def _compile_healing_cache(session: InferenceSession, graph: Graph) -> CompiledModel:
    """``session.compile``, recompiling when MAX finds its cached artifact corrupt.

    MAX verifies a cached artifact's hash and fails the compile when it does
    not match (a truncated write, a disk error); it does not recompile by
    itself. The blamed file is removed and the graph compiled afresh, once.
    """
    try:
        return session.compile(graph)
    except Exception as e:
        path = _corrupt_cache_file(e)
        if path is None:
            raise
        logs.warn(
            f"torch-max-backend: MAX's cache entry {path} is corrupt; "
            "removing it and compiling the graph again",
            RuntimeWarning,
            logger="cache",
            stacklevel=2,
        )
        path.unlink(missing_ok=True)
        return session.compile(graph)


def _artifact_count() -> int:
    """Compiled graphs in MAX's disk cache (one file each)."""
    root = cache_root() / ".max_cache"
    return sum(1 for p in root.rglob("*") if p.is_file()) if root.is_dir() else 0


def _load(
    session: InferenceSession, graph: Graph, text: str, device: str
) -> tuple[Model, bool]:
    """The model of ``graph``, and whether it came from a disk cache.

    Our saved artifact first (milliseconds), else MAX's compiler, which
    itself answers from its disk cache when it compiled the graph before.
    """
    path = artifact_path(text, device)
    model = read_artifact(session, path)
    if model is not None:
        return model, True
    # MAX does not say whether it compiled or loaded; a load writes no new
    # artifact. (Another process compiling at the same time can make a load
    # look like a compile, never the reverse.)
    before = _artifact_count()
    compiled = _compile_healing_cache(session, graph)
    from_disk = _artifact_count() == before
    write_artifact(compiled, path)
    return session.init(compiled), from_disk


def compile_graph(
    graph: Graph, device: torch.device, *, keep: int | None = None
) -> tuple[Model, CompileRecord, Hold]:
    """The loaded MAX model of ``graph``, compiled at most once per process
    while it stays in the table of ``keep`` most recently used models.

    The ``Hold`` keeps the model in that table while it lives: the caller
    keeps it as long as it may run the model.
    """
    text = str(graph)  # a few ms for a large graph: once per compile
    key = graph_key(text)
    cache_key = (key, str(device))
    start = time.perf_counter()
    from_disk = False
    with _LOCK:  # MAX serializes compiles anyway; this also guards the table
        if keep is not None:
            MODELS.resize(keep)
            COMPILE_LOG.resize(keep)
        model = MODELS.get(cache_key)
        cached = model is not None
        if model is None:
            model, from_disk = _load(session_for(device), graph, text, str(device))
            MODELS.put(cache_key, model, held=True)
            token = MODELS.hold(cache_key, already_counted=True)
        else:
            token = MODELS.hold(cache_key)
    libraries = tuple(str(p) for p in graph.kernel_libraries_paths)
    record = CompileRecord(
        cache_key, time.perf_counter() - start, cached, from_disk, libraries
    )
    COMPILE_LOG.append(record)
    if cached:
        stats.record(cache_hits=1)
    else:
        stats.record(
            max_compiles=1,
            disk_cache_hits=int(from_disk),
            kernel_graphs=int(bool(libraries)),
            compile_seconds=record.seconds,
        )
    return model, record, token
