"""Process-wide compile statistics: what compiling cost, and what the caches saved.

``compile_stats()`` returns a snapshot; ``reset_compile_stats()`` starts over,
except for ``pending``, a gauge of compiles still running. Counters are
updated under a lock, never on the per-call path of a graph running on MAX.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class CompileStats:
    """Counts and seconds since the process started (or the last reset).

    Attributes:
        graphs_built: ATen graphs (forward, backward, inference) lowered to
            MAX graphs.
        max_compiles: MAX graphs handed to MAX's compiler; MAX serves one from
            its disk cache (``~/.cache/modular``) when an earlier process
            compiled the same graph.
        disk_cache_hits: those of ``max_compiles`` that MAX loaded from its
            disk cache instead of compiling (it wrote no new artifact).
        cache_hits: MAX graphs found already loaded in this process (same
            structure, device and settings), which cost no compile at all.
        kernel_graphs: of ``max_compiles``, the graphs that load Mojo kernel
            libraries (custom kernels); a graph without custom ops loads none.
        build_seconds: time spent lowering ATen graphs to MAX graphs.
        compile_seconds: time spent in MAX's compiler and loader (summed
            over compiles, which may overlap in worker processes).
        warm_starts: ATen graphs run without building their MAX graph:
            an earlier process (or a bundle) recorded the plan and the
            compiled artifact of the same graph (pipeline/warm_start.py).
        eager_calls: calls of a graph that ran in PyTorch while its MAX
            graph was still compiling in the background.
        product_upgrades: graphs first compiled with small products built
            as sums (a quick compile) that switched to a compile of the
            same graph on MAX's matmul kernel (pipeline/product_upgrade.py).
        pending: ATen graphs whose MAX graphs are not ready yet (queued,
            building or compiling); a gauge that a reset does not zero.
    """

    graphs_built: int = 0
    max_compiles: int = 0
    disk_cache_hits: int = 0
    cache_hits: int = 0
    kernel_graphs: int = 0
    build_seconds: float = 0.0
    compile_seconds: float = 0.0
    warm_starts: int = 0
    eager_calls: int = 0
    product_upgrades: int = 0
    pending: int = 0


_lock = threading.Lock()
_stats = CompileStats()
_pending = 0


def compile_stats() -> CompileStats:
    """A snapshot of the process's compile statistics."""
    return dataclasses.replace(_stats, pending=_pending)


def add_pending(change: int) -> None:
    """Count ATen graphs that started (+1) or finished (-1) compiling."""
    global _pending
    with _lock:
        _pending += change


def reset_compile_stats() -> None:
    global _stats
    with _lock:
        _stats = CompileStats()


def record(**increments: int | float) -> None:
    """Add to the named counters, e.g. ``record(graphs_built=1, build_seconds=t)``."""
    global _stats
    with _lock:
        _stats = dataclasses.replace(
            _stats, **{k: getattr(_stats, k) + v for k, v in increments.items()}
        )
