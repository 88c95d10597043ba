"""Per-call overhead of a compiled graph: ours against MAX's bare execute.

    python -m benchmarks.call_overhead [--params 0] [--runs 2000] [--background]
    python -m benchmarks.call_overhead --model t5 [--backend max|peer]

Compiles ``x + y * 2`` (plus ``--params`` parameter-like inputs added in), then
times eager PyTorch, the compiled function, and the underlying MAX model
executed directly on ready buffers; the difference of the last two is what
the backend adds per call. MAX's own execute drifts by a quarter on this
machine from one block of calls to the next, more than the backend adds, so
the four are timed in interleaved rounds and each figure is the median over
the rounds; the ratio is the median of the per-round ratios. With
``--background`` the function is compiled with ``background_compile`` and
timed after the switch to MAX (its calls then pass through the switch).
With ``--model`` a small model's call is split instead: Dynamo, AOTAutograd,
our call path and MAX's execute (benchmarks/call_split.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from benchmarks.call_split import MODELS


def per_call_us(fn, runs: int) -> float:
    for _ in range(10):
        fn()
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) / runs * 1e6


ROUNDS = 10


def measure(
    params: int = 0, runs: int = 2000, background: bool = False
) -> dict[str, float]:
    """Microseconds per call: eager, torch.compile(max), our CompiledGraph
    alone, and MAX's execute on ready buffers; ``runs`` calls of each in all."""
    from torch_max_backend import max_backend
    from torch_max_backend.runtime.compiled_graph import CompiledGraph, as_buffer

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
        options = {"background_compile": True} if background else None
        compiled = torch.compile(fn, backend=max_backend, options=options)
        x, y = torch.randn(16), torch.randn(16)
        with torch.no_grad():
            compiled(x, y)
        if background:
            from torch_max_backend import wait_compiled

            assert wait_compiled(timeout=600)
    finally:
        CompiledGraph.__init__ = original
    graph = graphs[0]
    inputs = [x, y, *weights]
    buffers = [as_buffer(inputs[i]) if isinstance(i, int) else i for i in graph._plan]
    timed = {
        "eager_us": lambda: fn(x, y),
        "compiled_us": lambda: compiled(x, y),
        "graph_us": lambda: graph([x, y, *weights]),
        "execute_us": lambda: graph._run[0](buffers),
    }
    rounds: dict[str, list[float]] = {key: [] for key in timed}
    with torch.no_grad():
        for _ in range(ROUNDS):
            for key, call in timed.items():
                rounds[key].append(per_call_us(call, max(runs // ROUNDS, 1)))
    figures: dict[str, float] = {"params": params}
    figures.update({key: statistics.median(v) for key, v in rounds.items()})
    figures["ratio"] = statistics.median(
        g / e for g, e in zip(rounds["graph_us"], rounds["execute_us"], strict=True)
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", type=int, default=0)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--background", action="store_true")
    parser.add_argument(
        "--model",
        help="split a small model's call: " + ", ".join(MODELS),
    )
    parser.add_argument("--backend", choices=("max", "peer"), default="max")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.model:
        from benchmarks import call_split

        figures = call_split.split(args.model, args.backend, args.calls)
        print(
            json.dumps(figures)
            if args.json
            else "\n".join(call_split.describe(figures))
        )
        return
    m = measure(args.params, args.runs, args.background)
    print(f"inputs: 2 + {args.params} parameter-like tensors")
    print(f"eager PyTorch            {m['eager_us']:8.1f} us")
    print(f"torch.compile(max)       {m['compiled_us']:8.1f} us")
    print(f"  CompiledGraph call     {m['graph_us']:8.1f} us")
    print(f"  MAX execute, bare      {m['execute_us']:8.1f} us")
    print(
        f"backend overhead         {m['graph_us'] - m['execute_us']:8.1f} us "
        f"({m['ratio']:.2f}x bare execute, median of {ROUNDS} rounds)"
    )


if __name__ == "__main__":
    main()
