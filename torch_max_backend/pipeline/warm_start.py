"""Warm starts: an ATen graph compiled before runs without building its MAX graph.

Building a MAX graph costs a large model about half a second (GPT-2 small:
0.46 s on an AMD EPYC), which a process pays again for every graph even
when the compiled artifact is on disk, because artifacts are found by the
MAX graph's text. So, when a whole graph compiles, a record keyed by the
ATen graph's fingerprint (lower/builder/fingerprint.py) saves its plan and
names its artifact (storage/known_graphs.py). A later process, or one that
loaded a bundle, with the same ATen graph reads the record and the
artifact, and plans only the graph's inputs, so that every constant and
scalar is read from the graph in hand, never from the record.

Only whole graphs are recorded: a graph split around ops that run in
PyTorch builds its blocks to decide where each node runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from max.engine import Model
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .. import logs
from ..lower.builder import BuiltGraph, InputPlan, graph_device
from ..plan import GraphPlan, plan_from_data, plan_to_data
from ..runtime.model_table import Hold
from ..runtime.session import CompileRecord, load_saved, local_text, portable_text
from ..runtime.stats import record as record_stats
from ..settings import Settings
from ..storage.known_graphs import forget, read_record, record_path, write_record
from .fallback import Placement, needs_torch
from .graph_builds import GraphBuilds

_log = logs.get_logger("compile")


@dataclass
class WarmGraph:
    """A graph's plan, constants and loaded model, found without a build."""

    plan: GraphPlan
    constants: list[torch.Tensor]
    model: Model
    token: Hold
    seconds: float
    # The recorded graph's largest summed product (product_upgrade.py).
    largest_upgradable_sum: int = 0


def start_warm(
    gm: torch.fx.GraphModule,
    builds: GraphBuilds,
    fingerprint: str,
    settings: Settings,
) -> WarmGraph | None:
    """``gm`` from its record and saved artifact; None when there is no
    usable record (the caller then builds and compiles as usual, with the
    passes' findings ``builds`` kept for ``gm``)."""
    start = time.perf_counter()
    # Inputs are planned only for a graph with a record: a cold graph's
    # build plans them anyway.
    path = record_path(fingerprint, str(graph_device(gm)))
    saved = read_record(path)
    if saved is None or needs_torch(gm, Placement(settings)):
        return None  # never compiled whole, or split now (torch_executed_ops)
    findings = builds.findings(gm)
    with unset_fake_temporarily():  # constants are real tensors
        inputs = InputPlan(gm, findings, index_origin=saved.get("index_origin") is True)
    try:
        plan = plan_from_data(saved["plan"])
        key = saved["graph_key"]
        # A record written before few-row sums stopped counting for the
        # upgrade names "largest_sum" instead: forgotten, so built once more.
        upgradable = saved["largest_upgradable_sum"]
        artifact = path.parent.parent / _file_name(saved["artifact"])
        libraries = tuple(local_text(p) for p in saved["kernel_libraries"])
    except (KeyError, TypeError, ValueError) as e:
        _log.info("torch-max-backend: malformed record %s: %s", path, e)
        forget(path)
        return None
    if plan.inputs != tuple(inputs.sources) or plan.device != str(inputs.device):
        forget(path)  # cannot happen for one fingerprint, unless edited
        return None
    if not all(Path(p).exists() for p in libraries):
        return None  # the Mojo kernels it loads were cleared: build them
    loaded = load_saved(
        key, artifact, inputs.device, libraries, keep=settings.max_cached_graphs
    )
    if loaded is None:
        forget(path)
        return None
    model, _, token = loaded
    record_stats(warm_starts=1)
    seconds = time.perf_counter() - start
    _log.debug("torch-max-backend: warm start from %s in %.3fs", path, seconds)
    return WarmGraph(
        plan,
        inputs.constants,
        model,
        token,
        seconds,
        upgradable if isinstance(upgradable, int) else 0,
    )


def _file_name(name: object) -> str:
    """An artifact's file name from a record: no directory, nothing hidden."""
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        raise ValueError(f"not an artifact name: {name!r}")
    return name


def remember(
    fingerprint: str,
    built: BuiltGraph,
    record: CompileRecord,
    *,
    replace: bool = False,
) -> None:
    """Save the record of a whole graph just compiled (``record``) whose
    ATen graph has ``fingerprint``; ``replace``: over an earlier record (a
    graph's products upgraded, product_upgrade.py)."""
    artifact = record.artifact
    if artifact is None or not artifact.is_file():
        return  # not saved: a later process compiles it anyway
    path = record_path(fingerprint, built.plan.device)
    if path.is_file() and not replace:
        return
    write_record(
        path,
        {
            "plan": plan_to_data(built.plan),
            "index_origin": built.index_origin,
            "largest_upgradable_sum": built.largest_upgradable_sum,
            "graph_key": record.key[0],
            "artifact": artifact.name,
            "kernel_libraries": [
                portable_text(str(p)) for p in built.graph.kernel_libraries_paths
            ],
        },
    )
