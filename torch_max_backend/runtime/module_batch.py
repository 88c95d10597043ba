"""Graphs asked for together compile together, as one MAX module.

MAX's compiler pays most of a cold compile once per compile, not per graph.
Measured from empty caches on an AMD EPYC (2 cores): ``x + 1`` alone 8.6 s,
``x + 1`` and ``x * 2`` as two compiles 16.7 s, as one module 8.7 s; the
suite's MLP training step's forward and backward 63 s as two compiles, 46 s
side by side in two compile workers, 39 s as one module in one worker, which
leaves the other worker free for the optimizer's graph.

So the compiles started inside ``gathered()`` on one thread (a training
step's forward and backward under background compilation, the blocks of a
graph split around an op that runs in PyTorch) are held until it ends and
then compiled as one module. Each graph is renamed after its own key inside
the module, so that the artifact saved for any one of them (the whole
module) still finds it by name. When the graphs cannot be merged, or the
module fails to compile, each graph is compiled by itself, so that one
graph MAX refuses takes no other down with it.

One module is not always faster. What a module shares is mostly MAX's
matmul kernel (about 50 CPU s the first time a compile holds one); graphs
without it (products summed, our kernels) share less than two compile
workers gain by compiling them side by side. From empty caches on an Intel
Xeon (2 cores), a training step's first call with forward and backward each
alone in two workers against one module: the model check's ResNet 117.3,
108.9, 96.2 s against 126.2, 121.9, 110.0 (alternating); a small
MobileNetV2 559 and 677 s against 627 and 838; but the suite's MLP step,
whose graphs hold MAX matmuls, 218.6 s against 203.5 (docs/benchmarks.md).
So with several CPU workers, the graphs holding a MAX matmul compile as one
module and the others each by itself while there are workers to spare for
them (``compile_groups``).
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from max import mlir
from max._core import Operation
from max.engine import InferenceSession, Model
from max.engine.api import CompiledModel
from max.graph import Graph, Module

from .. import logs
from ..errors import first_line
from .compile_workers import (
    copy_outcome,
    start_compile,
    start_module_compile,
    worker_count,
)

logger = logs.get_logger("compile")

_local = threading.local()
# A graph's opening: its name, then its symbolic sizes' declarations, if any
# (``mo.graph @torch_max_graph<rows, cols>(``), which a renamed graph keeps.
_GRAPH_OP = re.compile(r"^(\s*mo\.graph @)[A-Za-z0-9_$.]+(?=[<(])")
# MAX's own matmul op in a graph's text (ops.matmul builds it for every rank).
_MAX_MATMUL = re.compile(r"\brmo\.matmul\(")


def member_name(key: str) -> str:
    """The name a graph of key ``key`` has inside a module of several."""
    return f"torch_max_graph_{key}"


class CompiledModule:
    """A module compiled once; its models are initialized once per session,
    for all the graphs that ask."""

    def __init__(self, compiled: CompiledModel) -> None:
        self.compiled = compiled
        self._models: dict[int, dict[str, Model]] = {}
        self._lock = threading.Lock()

    def model(self, session: InferenceSession, name: str) -> Model:
        with self._lock:
            models = self._models.get(id(session))
            if models is None:
                models = self._models[id(session)] = session.init_all(self.compiled)
        return models[name]


@dataclass(frozen=True)
class ModuleMember:
    """What a gathered graph's compile gives: the module it was compiled in,
    and its name there."""

    module: CompiledModule
    name: str

    @property
    def compiled(self) -> CompiledModel:
        return self.module.compiled

    def init(self, session: InferenceSession) -> Model:
        return self.module.model(session, self.name)


@dataclass
class _Request:
    session: InferenceSession
    graph: Graph
    text: str
    device: torch.device
    name: str
    future: Future = field(default_factory=Future)


@contextmanager
def gathered() -> Iterator[None]:
    """Hold the compiles started on this thread until the block ends, then
    compile them together (per device). Nested blocks join the outer one."""
    if getattr(_local, "requests", None) is not None:
        yield
        return
    _local.requests = []
    try:
        yield
    finally:
        requests, _local.requests = _local.requests, None
        _submit(requests)


def gathering() -> bool:
    """Whether compiles started on this thread now are held for a gathering."""
    return getattr(_local, "requests", None) is not None


@contextmanager
def alone() -> Iterator[None]:
    """Compiles started inside this block are not gathered (their caller
    waits for them at once)."""
    requests = getattr(_local, "requests", None)
    _local.requests = None
    try:
        yield
    finally:
        _local.requests = requests


def start_gathered(
    session: InferenceSession,
    graph: Graph,
    text: str,
    device: torch.device,
    key: str,
) -> Future:
    """Compile ``graph`` (whose text is ``text``): with the others of the
    gathering under way on this thread, if any, else by itself. The future
    gives a ``CompiledModel``, or a ``ModuleMember`` when it was compiled
    with others."""
    requests = getattr(_local, "requests", None)
    if requests is None:
        return start_compile(session, graph, device)
    request = _Request(session, graph, text, device, member_name(key))
    requests.append(request)
    return request.future


def _submit(requests: list[_Request]) -> None:
    by_device: dict[str, list[_Request]] = {}
    for request in requests:
        by_device.setdefault(str(request.device), []).append(request)
    for device_group in by_device.values():
        for group in compile_groups(device_group, device_group[0].device):
            _submit_together(group)


def compile_groups(
    requests: list[_Request], device: torch.device
) -> list[list[_Request]]:
    """How one device's gathered graphs are compiled: each list one compile
    (see the module's docstring for the measurements behind the rule)."""
    workers = worker_count() if device.type == "cpu" else 1
    if workers < 2 or len(requests) < 2:
        return [requests]
    with_matmul: list[_Request] = []
    others: list[_Request] = []
    for request in requests:  # one scan of each text (MobileNetV2's: 0.6 MB)
        (with_matmul if _MAX_MATMUL.search(request.text) else others).append(request)
    groups = [with_matmul] if with_matmul else []
    # At least one worker is spare here: two or more, one module at most.
    if len(others) <= workers - len(groups):
        groups.extend([r] for r in others)
    else:
        groups.append(others)
    return groups


def _submit_together(group: list[_Request]) -> None:
    """Compile ``group`` as one module (a single graph by itself)."""
    module = _merged(group) if len(group) > 1 else None
    if module is None:
        _each_alone(group)
        return
    libraries = sorted({str(p) for r in group for p in r.graph.kernel_libraries_paths})
    first = group[0]
    logger.debug("torch-max-backend: compiling %d graphs as one module", len(group))
    compiling = start_module_compile(
        first.session, module, [Path(p) for p in libraries], first.device
    )
    compiling.add_done_callback(lambda done: _settle(done, group))


def _settle(done: Future, group: list[_Request]) -> None:
    error = done.exception()
    if error is not None:
        logger.info(
            "torch-max-backend: a module of %d graphs failed to compile (%s); "
            "compiling each graph by itself",
            len(group),
            first_line(error),
        )
        _each_alone(group)
        return
    module = CompiledModule(done.result())
    # Last first: each result's callbacks (loading the member, settling its
    # pending count) run inside set_result, after its waiters woke. The
    # first graph handed over (a step's forward) is the one called first;
    # when its caller wakes, the others' callbacks have all run.
    for request in reversed(group):
        request.future.set_result(ModuleMember(module, request.name))


def _each_alone(group: list[_Request]) -> None:
    for request in group:
        alone = start_compile(request.session, request.graph, request.device)
        alone.add_done_callback(lambda done, r=request: copy_outcome(done, r.future))


def _merged(group: list[_Request]) -> Module | None:
    """One module holding every graph of ``group``, each renamed after its
    key; None when their text does not merge (logged)."""
    try:
        header = group[0].graph.module.mlir_module.asm().splitlines()[0]
        bodies = []
        for request in group:
            if not _GRAPH_OP.match(request.text):
                raise ValueError("a graph's text does not start with mo.graph")
            bodies.append(_GRAPH_OP.sub(rf"\g<1>{request.name}", request.text, count=1))
        context = mlir.Context()
        parsed = mlir.Module.parse("\n".join([header, *bodies, "}"]), context)
        bytecode = io.BytesIO()
        parsed.operation.write_bytecode(bytecode)
        module = Module(
            mlir_module=Operation.from_bytecode(bytecode.getvalue(), context)
        )
        if sorted(module.top_level_graph_names()) != sorted(r.name for r in group):
            raise ValueError("the module does not hold exactly the graphs merged")
        return module
    except Exception as e:  # the graphs still compile, one by one
        logger.debug("torch-max-backend: graphs not merged into a module: %s", e)
        return None
