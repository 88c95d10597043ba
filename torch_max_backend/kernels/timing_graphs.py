"""The small graphs that time forms (products, convolutions): compiled
together, kept as artifacts.

Timing a product's forms (product_timing.py) needs one compiled graph per
form, and on a new machine those compiles are most of a model's first call:
the model check's llama under autocast waited 99 s of its first inference
call (144 s) and 108 s of its first training step for three bfloat16 forms
each (AMD EPYC Zen 4, 2 cores, empty caches). MAX pays most of a cold
compile once per compile, not per graph, so the forms a timing lacks are
compiled as one module: the three forms 51.9 s together against 90.0 s one
after another (docs/benchmarks.md, "Timing graphs compiled together").

Each graph's compiled module is then saved under the graph's own text
(storage/artifacts.py's ``timing_artifact_path``), so a later process loads
any form it times from its artifact in milliseconds, whichever forms were
compiled with it, and compiles only the forms no process compiled before.
The artifacts are not bundled: a timing serves only its own machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from max.driver import CPU
from max.engine import InferenceSession, Model
from max.graph import Graph, Module

from .. import logs
from ..storage.artifacts import read_artifact, timing_artifact_path, write_artifact

# Builds one timing graph: standalone (None), or into a module shared with
# other graphs. Its graph's name is the one it is asked for by.
Build = Callable[[Module | None], Graph]

_log = logs.get_logger("compile")
_lock = threading.Lock()
_session: InferenceSession | None = None


def timing_session() -> InferenceSession:
    """The one session every timing graph of this process runs in."""
    global _session
    with _lock:
        if _session is None:
            _session = InferenceSession(devices=[CPU()])
        return _session


def load_timing_graphs(
    builds: Mapping[str, Build], optional: Collection[str] = ()
) -> dict[str, Model]:
    """Each of ``builds``'s graphs, by name, ready to run: read from its
    saved artifact where this machine compiled it before, the others
    compiled together as one module (each alone if the module fails). A
    graph named in ``optional`` that fails alone is left out (logged); any
    other's failure is raised."""
    session = timing_session()
    models: dict[str, Model] = {}
    missing: dict[str, tuple[Build, Path]] = {}
    for name, build in builds.items():
        path = timing_artifact_path(str(build(None)))
        model = read_artifact(session, path, name, bundled=False)
        if model is None:
            missing[name] = (build, path)
        else:
            models[name] = model
    if len(missing) > 1:
        try:
            models.update(_compile_together(session, missing))
            return models
        except Exception as e:  # each graph alone: one graph's fault is its own
            _log.info(
                "torch-max-backend: timing graphs %s did not compile together "
                "(%s); compiling each alone",
                ", ".join(missing),
                str(e).splitlines()[0] if str(e) else type(e).__name__,
            )
    for name, (build, path) in missing.items():
        try:
            models.update(_compile_together(session, {name: (build, path)}))
        except Exception as e:
            if name not in optional:
                raise
            _log.info("torch-max-backend: timing graph %s left out: %s", name, e)
    return models


def _compile_together(
    session: InferenceSession, graphs: Mapping[str, tuple[Build, Path]]
) -> dict[str, Model]:
    """``graphs`` compiled as one module, saved under each graph's path."""
    started = time.perf_counter()
    module = Module()
    built = [build(module) for build, _ in graphs.values()]
    libraries = sorted({str(p) for g in built for p in g.kernel_libraries_paths})
    compiled = session.compile(module, custom_extensions=libraries)
    models = session.init_all(compiled)
    for _, path in graphs.values():
        write_artifact(compiled, path, bundled=False)
    _log.info(
        "torch-max-backend: timing graph(s) %s compiled in %.1f s",
        ", ".join(graphs),
        time.perf_counter() - started,
    )
    return {name: models[name] for name in graphs}
