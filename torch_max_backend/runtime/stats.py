"""Process-wide compile statistics: what compiling cost, and what the caches saved.

``compile_stats()`` returns a snapshot; ``reset_compile_stats()`` starts over.
Counters are updated under the compile lock, never on the per-call path.
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
        compile_seconds: time spent in MAX's compiler and loader.
    """

    graphs_built: int = 0
    max_compiles: int = 0
    disk_cache_hits: int = 0
    cache_hits: int = 0
    kernel_graphs: int = 0
    build_seconds: float = 0.0
    compile_seconds: float = 0.0


_lock = threading.Lock()
_stats = CompileStats()


def compile_stats() -> CompileStats:
    """A snapshot of the process's compile statistics."""
    return _stats


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
