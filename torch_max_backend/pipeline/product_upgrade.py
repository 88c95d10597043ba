"""Graphs compiled with summed products move to MAX's matmul once it is compiled.

On the CPU, a graph whose every product is small builds them as sums
(lower/products.py): it compiles in about 20 s, where MAX's matmul kernel
would add about 50 s, but every call pays for it: the model check's T5 and
llama configs ran 2-3x slower summed than on the matmul kernel
(``python -m benchmarks.call_overhead --model llama``, docs/benchmarks.md).
So the sums are only the quick first tier: once a graph with a summed
product of ``MATMUL_FASTER_FROM`` multiply-adds or more over
``MATMUL_FASTER_ROWS`` rows or more is running (smaller sums, and those of a
few rows such as a decode step's attention, run about as fast as the matmul,
or faster), its matmul version is built on a thread of ours and compiled in
a compile worker process at the lowest CPU priority (an upgrade compiled at
normal priority on 2 cores made a training step's graphs 2-3x slower for the
minutes it took), and the running graph switches to it with one attribute
swap (``CompiledGraph.switch_model``). Its warm-start record then names the
matmul artifact, so a later process starts on it at once; one that loads a
record still naming the sums (its process ended first) upgrades the same
way.

Nothing is ever waited for: calls run on the sums until the switch, and a
build or compile that fails leaves the graph on them (logged). Only where
compiles run in worker processes (``compile_workers`` above 1): MAX's
in-process compile cannot be abandoned, so a short script would wait for
it at exit, where a worker's compile is dropped. ``wait_compiled()`` waits
for upgrades too; ``upgrade_products=False`` turns them off.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from .. import logs
from ..lower.builder import BuiltGraph
from ..lower.products import MATMUL_FASTER_FROM
from ..plan import GraphPlan
from ..runtime import stats
from ..runtime.compile_workers import at_low_priority, dropped_at_exit, worker_count
from ..runtime.compiled_graph import CompiledGraph
from ..runtime.module_batch import alone
from ..runtime.session import compile_graph_async
from ..settings import Settings
from .graph_builds import GraphBuilds
from .warm_start import remember

_log = logs.get_logger("compile")
_graphs_log = logs.get_logger("graphs")
_lock = threading.Lock()
_jobs: set[Future[bool]] = set()


def _worth_it(settings: Settings, plan: GraphPlan, largest: int) -> bool:
    """Whether a graph of ``plan`` whose largest summed product of many rows
    (``largest_upgradable_sum``) has ``largest`` multiply-adds gets its
    matmul version compiled: not when every sum is small enough, or of few
    enough rows, to run as fast as the matmul would."""
    return (
        largest >= MATMUL_FASTER_FROM
        and settings.upgrade_products
        and plan.device.startswith("cpu")
        and worker_count() > 1
    )


def start_upgrade(
    builds: GraphBuilds,
    gm: torch.fx.GraphModule,
    compiled: CompiledGraph,
    plan: GraphPlan,
    largest_upgradable_sum: int,
    fingerprint: str | None,
    settings: Settings,
) -> Future[bool] | None:
    """Where worth it (a summed product of ``largest_upgradable_sum``
    multiply-adds over many rows), build ``gm`` (the whole graph of
    ``builds`` or one of its blocks) with every product on MAX's matmul,
    compile it, then switch ``compiled`` (running ``plan``) to it; the
    future says whether it switched, None when no upgrade was started.
    Returns at once."""
    if not _worth_it(settings, plan, largest_upgradable_sum):
        return None
    upgrade = _Upgrade(
        builds.with_matmuls(),
        gm,
        compiled,
        plan,
        fingerprint,
        settings.max_cached_graphs,
    )
    with _lock:
        _jobs.add(upgrade.job)
    upgrade.job.add_done_callback(_forget)
    _log.info(
        "torch-max-backend: graph %s runs its products as sums; compiling "
        "its matmul version in the background",
        compiled.name,
    )
    threading.Thread(
        target=upgrade.run, name="max-product-upgrade", daemon=True
    ).start()
    return upgrade.job


@dataclass
class _Upgrade:
    """One graph's upgrade: built on a thread of its own, compiled in a
    worker process, switched to from the compile's callback."""

    builds: GraphBuilds  # with every product on MAX's matmul
    gm: torch.fx.GraphModule
    compiled: CompiledGraph
    plan: GraphPlan
    fingerprint: str | None
    keep: int  # the model table's bound (settings.max_cached_graphs)
    job: Future[bool] = field(default_factory=Future)

    def run(self) -> None:
        try:
            built = self.builds.build(self.gm)
            if built.plan != self.plan or built.largest_upgradable_sum:
                # Cannot happen for one ATen graph; never switch to a model
                # whose inputs or outputs differ from the running one's.
                self._stay("its matmul version plans other inputs or outputs")
                return
            if _graphs_log.isEnabledFor(logging.DEBUG):
                _graphs_log.debug(
                    "torch-max-backend: MAX graph %s, its products on MAX's matmul:\n%s",
                    self.compiled.name,
                    built.graph,
                )
            # Never gathered with the caller's compiles; dropped at exit;
            # never taking a core from the graphs running meanwhile.
            with alone(), dropped_at_exit(), at_low_priority():
                compiling = compile_graph_async(
                    built.graph, built.device, keep=self.keep
                )
        except Exception as e:  # the sums keep running: nothing is lost
            self._stay(f"{type(e).__name__}: {e}")
            return
        compiling.add_done_callback(lambda done: self._switch(done, built))

    def _switch(self, done: Future, built: BuiltGraph) -> None:
        try:
            model, record, token = done.result()
            self.compiled.switch_model(model, token)
            if self.fingerprint is not None:
                remember(self.fingerprint, built, record, replace=True)
        except Exception as e:
            self._stay(f"{type(e).__name__}: {e}")
            return
        stats.record(product_upgrades=1)
        _log.info(
            "torch-max-backend: graph %s switched to MAX's matmul kernel",
            self.compiled.name,
        )
        self.job.set_result(True)

    def _stay(self, why: str) -> None:
        _log.info(
            "torch-max-backend: graph %s keeps its summed products: %s",
            self.compiled.name,
            why,
        )
        self.job.set_result(False)


def _forget(job: Future[bool]) -> None:
    with _lock:
        _jobs.discard(job)


def unfinished_upgrades() -> list[Future[bool]]:
    """The upgrades still building or compiling (wait_compiled waits)."""
    with _lock:
        return list(_jobs)
