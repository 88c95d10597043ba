"""Long-running use: many calls of one compiled model, resident memory before and after.

    python -m benchmarks.soak [--calls 10000]

A small MLP compiled with ``backend="max"`` and a dynamic batch is called with
inputs of four batch sizes in turn, each result compared with eager. The
resident set size is read after a warm-up and again after ``--calls`` calls;
the command exits non-zero when it grew by ``ALLOWED_GROWTH_MIB`` or more or
when any result differed from eager.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from typing import Any

import torch
from torch import nn

WIDTH = 32
BATCHES = (2, 3, 5, 8)
WARMUP_CALLS = 500
ALLOWED_GROWTH_MIB = 50


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, 64), nn.GELU(), nn.Linear(64, WIDTH)).eval()


def compiled(eager: nn.Module) -> Any:
    """``eager`` compiled for MAX, its batch dim dynamic: one graph for all sizes."""
    from torch_max_backend import max_backend

    return torch.compile(
        eager, backend=max_backend, dynamic=True, options={"strict": True}
    )


def resident_mib() -> float:
    """The process's resident set size now (Linux), else its peak."""
    gc.collect()
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(calls: int = 10_000) -> dict[str, Any]:
    """Warm up, then ``calls`` calls; resident memory after each part."""
    eager = model()
    run_max = compiled(eager)
    inputs = [torch.randn(b, WIDTH) for b in BATCHES]
    expected = [eager(x).detach() for x in inputs]
    wrong = 0

    def call(i: int) -> None:
        nonlocal wrong
        k = i % len(inputs)
        with torch.no_grad():
            if not torch.allclose(
                run_max(inputs[k]), expected[k], rtol=1e-4, atol=1e-5
            ):
                wrong += 1

    for i in range(WARMUP_CALLS):
        call(i)
    warm = resident_mib()
    started = time.perf_counter()
    for i in range(calls):
        call(i)
    seconds = time.perf_counter() - started
    end = resident_mib()
    return {
        "calls": calls,
        "wrong": wrong,
        "warm_mib": round(warm, 1),
        "end_mib": round(end, 1),
        "growth_mib": round(end - warm, 1),
        "us_per_call": round(seconds / max(calls, 1) * 1e6, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    args = parser.parse_args(argv)
    r = run(args.calls)
    print(
        f"{r['calls']} calls after {WARMUP_CALLS} warm-up calls, batch sizes "
        f"{BATCHES}: resident memory {r['warm_mib']} MiB after warm-up, "
        f"{r['end_mib']} MiB at the end ({r['growth_mib']:+} MiB, allowed "
        f"{ALLOWED_GROWTH_MIB}); {r['us_per_call']} us a call; "
        f"{r['wrong']} result(s) differing from eager"
    )
    if r["wrong"] or r["growth_mib"] >= ALLOWED_GROWTH_MIB:
        sys.exit(1)


if __name__ == "__main__":
    main()
