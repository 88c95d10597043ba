"""Per-graph compile and run times, for ``profile`` (TORCH_MAX_BACKEND_PROFILE).

A profiled compiled graph times each call; the table is logged at exit on
the ``torch_max_backend.profile`` logger (printed to stderr by default).
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import no_type_check

import torch
from max.engine import Model
from tabulate import tabulate

from ..plan import GraphPlan
from .compiled_graph import CompiledGraph
from .model_table import BoundedLog
from .stats import compile_stats

log = logging.getLogger("torch_max_backend.profile")


@dataclass
class GraphStats:
    name: str
    compile_seconds: float
    compile_cached: bool
    calls: int = 0
    run_seconds: float = 0.0


# The latest profiled graphs; bounded like the model table.
PROFILE: BoundedLog[GraphStats] = BoundedLog()
_at_exit = False


class ProfiledCompiledGraph(CompiledGraph):
    """A CompiledGraph that also times each call, for TORCH_MAX_BACKEND_PROFILE."""

    def __init__(
        self,
        name: str,
        model: Model | None,
        plan: GraphPlan,
        constants: Sequence[torch.Tensor],
        stats: GraphStats,
        keep: int,
    ) -> None:
        super().__init__(name, model, plan, constants)
        self.stats = stats
        global _at_exit
        if not _at_exit:
            atexit.register(log_profile)
            _at_exit = True
        PROFILE.resize(keep)
        PROFILE.append(stats)

    @no_type_check
    def __call__(self, args: list) -> list:
        start = time.perf_counter()
        outputs = super().__call__(args)
        self.stats.run_seconds += time.perf_counter() - start
        self.stats.calls += 1
        return outputs


def profile_table() -> str:
    rows = [
        [
            s.name,
            f"{s.compile_seconds:.2f}" + (" (cached)" if s.compile_cached else ""),
            s.calls,
            f"{s.run_seconds * 1e3:.3f}",
            f"{s.run_seconds / s.calls * 1e6:.1f}" if s.calls else "-",
        ]
        for s in PROFILE
    ]
    return tabulate(
        rows,
        headers=["graph", "compile s", "calls", "run total ms", "run mean us"],
    )


def log_profile() -> None:
    if PROFILE:
        s = compile_stats()
        log.info(
            "torch-max-backend profile:\n%s\n%d graph(s) built in %.2fs; "
            "%d MAX compile(s) in %.2fs (%d from MAX's disk cache); "
            "%d in-process cache hit(s)",
            profile_table(),
            s.graphs_built,
            s.build_seconds,
            s.max_compiles,
            s.compile_seconds,
            s.disk_cache_hits,
            s.cache_hits,
        )
