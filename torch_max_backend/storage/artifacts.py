"""Compiled graphs kept on disk as MAX artifacts (``.mef``), keyed by graph text.

MAX's own disk cache makes a second process's compile a cache lookup, but
that lookup still runs MAX's compile pipeline up to its cache key: about
0.8 s for a 2-layer GPT-2 here, more in a fresh process. Reading the compiled
artifact back and initializing it takes about 2 ms. So every graph MAX
compiles for us is exported next to MAX's caches, and a later process with
the same graph text (weights and scalars are inputs, names are stable)
initializes the artifact instead of compiling.

An artifact that cannot be read (truncated by a crash, written by another
MAX build) is removed with a warning and the graph compiled again; artifacts
are written to a temporary name and renamed, so a reader never sees half a
file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import OrderedDict
from pathlib import Path

from max.engine import InferenceSession, Model
from max.engine.api import CompiledModel, read

from .. import logs
from .cache_dir import own_cache_dir


def device_dir(device: str) -> str:
    """The directory name of ``device``'s artifacts: ``cpu``, ``cuda-0``."""
    return device.replace(":", "-")


def artifact_path(graph_text: str, device: str) -> Path:
    """Where the artifact of a graph compiled for ``device`` lives."""
    digest = hashlib.sha256(f"{device}\n{graph_text}".encode()).hexdigest()
    return own_cache_dir() / device_dir(device) / f"{digest}.mef"


def timing_artifact_path(graph_text: str) -> Path:
    """Where the artifact of a graph that times forms (kernels/timing_graphs.py)
    lives: apart from the model graphs' artifacts, which bundles carry; a
    timing graph serves only the machine that times with it."""
    digest = hashlib.sha256(graph_text.encode()).hexdigest()
    return own_cache_dir() / "timing" / f"{digest}.mef"


# Artifacts this process compiled or loaded, oldest first: what
# ``save_artifacts`` bundles. Bounded, as every process-wide table.
_USED: OrderedDict[Path, None] = OrderedDict()
USED_LIMIT = 65536


def note_used(path: Path) -> None:
    """Remember that this process ran the artifact at ``path``."""
    _USED[path] = None
    _USED.move_to_end(path)
    while len(_USED) > USED_LIMIT:
        _USED.popitem(last=False)


def used_artifacts() -> list[Path]:
    """The artifacts this process compiled or loaded that are still on disk."""
    return [p for p in list(_USED) if p.is_file()]


def read_artifact(
    session: InferenceSession,
    path: Path,
    name: str | None = None,
    *,
    bundled: bool = True,
) -> Model | None:
    """The model initialized from ``path``, or None when there is none.

    An artifact compiled with other graphs (one module) holds them all: the
    model is then the one called ``name``. A damaged artifact is removed
    (with a warning) and None returned, so the caller compiles afresh.
    ``bundled``: noted among the artifacts ``save_artifacts`` bundles.
    """
    if not path.is_file():
        return None
    try:
        models = session.init_all(read(path))
        model = next(iter(models.values())) if len(models) == 1 else models[name]
        if bundled:
            note_used(path)
        return model
    except Exception as e:  # MAX raises RuntimeError for a bad artifact
        logs.warn(
            f"torch-max-backend: the compiled graph {path} cannot be loaded "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "removing it and compiling the graph again",
            RuntimeWarning,
            logger="cache",
            stacklevel=3,
        )
        path.unlink(missing_ok=True)
        return None


def write_artifact(
    compiled: CompiledModel, path: Path, *, bundled: bool = True
) -> None:
    """Save ``compiled`` at ``path`` atomically; a failure only costs the
    saving. ``bundled``: as ``read_artifact``'s."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".partial")
        os.close(fd)
        try:
            compiled.export_mef(tmp)
            os.replace(tmp, path)
            if bundled:
                note_used(path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except (OSError, RuntimeError) as e:
        logs.warn(
            f"torch-max-backend: could not save the compiled graph to {path} "
            f"({e}); later processes will compile it again",
            RuntimeWarning,
            logger="cache",
            stacklevel=3,
        )
