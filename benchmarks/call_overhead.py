"""Per-call overhead of a compiled graph: ours against MAX's bare execute.

    python benchmarks/call_overhead.py [--params 0] [--runs 2000]

Compiles ``x + y * 2`` (plus ``--params`` parameter-like inputs added in), then
times eager PyTorch, the compiled function, and the underlying MAX model
executed directly on ready buffers; the difference of the last two is what
the backend adds per call.
"""

from __future__ import annotations

import argparse
import time

import torch

from torch_max_backend import max_backend
from torch_max_backend.runtime.compiled_graph import CompiledGraph, _as_buffer


def per_call_us(fn, runs: int) -> float:
    for _ in range(10):
        fn()
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) / runs * 1e6


def measure(params: int = 0, runs: int = 2000) -> dict[str, float]:
    """Microseconds per call: eager, torch.compile(max), our CompiledGraph
    alone, and MAX's execute on ready buffers."""
    weights = [torch.randn(16) for _ in range(params)]

    def fn(x, y):
        out = x + y * 2
        for w in weights:
            out = out + w
        return out

    graphs: list[CompiledGraph] = []
    original = CompiledGraph.__init__

    def remember(self, *a, **k):
        original(self, *a, **k)
        graphs.append(self)

    CompiledGraph.__init__ = remember
    try:
        compiled = torch.compile(fn, backend=max_backend)
        x, y = torch.randn(16), torch.randn(16)
        with torch.no_grad():
            compiled(x, y)
    finally:
        CompiledGraph.__init__ = original
    graph = graphs[0]
    inputs = [x, y, *weights]
    buffers = [_as_buffer(inputs[i]) if isinstance(i, int) else i for i in graph._plan]
    with torch.no_grad():
        return {
            "params": params,
            "eager_us": per_call_us(lambda: fn(x, y), runs),
            "compiled_us": per_call_us(lambda: compiled(x, y), runs),
            "graph_us": per_call_us(lambda: graph([x, y, *weights]), runs),
            "execute_us": per_call_us(lambda: graph._execute(buffers), runs),
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", type=int, default=0)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    m = measure(args.params, args.runs)
    print(f"inputs: 2 + {args.params} parameter-like tensors")
    print(f"eager PyTorch            {m['eager_us']:8.1f} us")
    print(f"torch.compile(max)       {m['compiled_us']:8.1f} us")
    print(f"  CompiledGraph call     {m['graph_us']:8.1f} us")
    print(f"  MAX execute, bare      {m['execute_us']:8.1f} us")
    print(
        f"backend overhead         {m['graph_us'] - m['execute_us']:8.1f} us "
        f"({m['graph_us'] / m['execute_us']:.2f}x bare execute)"
    )


if __name__ == "__main__":
    main()
