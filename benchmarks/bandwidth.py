"""The machine's memory read bandwidth, the bound of a decode step.

    python -m benchmarks.bandwidth

A decode step reads every weight once and does little arithmetic with each,
so its speed limit is how fast the cores can stream memory. This sums a
1 GiB float32 buffer (far larger than any cache) with PyTorch on every core
and on one, best of ten: a read-only stream, like a matrix-vector product's
pass over its weight.
"""

from __future__ import annotations

import time
from typing import Any

BUFFER_BYTES = 1 << 30


def _best_gbps(threads: int, repeats: int = 10) -> float:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        data = torch.ones(BUFFER_BYTES // 4, dtype=torch.float32)
        data.sum()  # fault the pages in
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            data.sum()
            best = min(best, time.perf_counter() - start)
        return BUFFER_BYTES / best / 1e9
    finally:
        torch.set_num_threads(before)


def measure() -> dict[str, Any]:
    """Read bandwidth in GB/s on every core, with how it was measured."""
    import os

    import torch

    threads = torch.get_num_threads()
    gbps, one = _best_gbps(threads), _best_gbps(1)
    how = (
        f"torch.sum over a 1 GiB float32 buffer, {threads} threads of "
        f"{os.cpu_count()} cores, best of 10; one thread: {one:.1f} GB/s"
    )
    return {"gbps": gbps, "one_thread_gbps": one, "threads": threads, "how": how}


if __name__ == "__main__":
    figures = measure()
    print(f"memory read bandwidth: {figures['gbps']:.1f} GB/s ({figures['how']})")
