"""Where a compiled training step's time goes: MAX's executes, our call path,
and the PyTorch work between the graphs.

    python -m benchmarks.step_split --model mlp-train [--steps 300] [--replay]
        [--traced-backward]

The step is the benchmark suite's (benchmarks/cases.py: zero_grad, forward,
cross-entropy, backward, optimizer step, all compiled with our backend). Each
``CompiledGraph`` call and each MAX execute inside it is time-stamped, so a
step splits into segments: the work before the first graph (Dynamo's guards,
``zero_grad``, AOTAutograd's wrapper), each graph's call (our call path:
argument buffers, output tensors, checks, write-backs) and its execute, the
work between graphs (autograd's engine, AOTAutograd's bookkeeping, Dynamo's
next frame, the optimizer's wrapper) and after the last. Figures are
medians over steps.

With ``--replay`` MAX does not run after the warm-up: each graph returns
copies of its last results, so the between-graph segments show what the
Python work alone costs. What a real step spends there beyond that is the
price of sharing two cores with MAX's worker threads, which busy-wait after
each task (docs/benchmarks.md, "Per-call overhead").

With ``--traced-backward`` Dynamo traces ``loss.backward()`` into the
forward's graph (``torch._dynamo.config.trace_autograd_ops``): the step runs
two graphs, the forward with its backward and the optimizer's update, and no
autograd engine between them.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from benchmarks import cases

TRAINING = ("mlp-train", "gpt2-train", "resnet18-train")


class _Stamps:
    """(label, time) points of one step, written by the instrumented calls."""

    def __init__(self) -> None:
        self.points: list[tuple[str, float]] = []
        self.replay = False

    def mark(self, label: str) -> None:
        self.points.append((label, time.perf_counter()))


def _instrument(stamps: _Stamps) -> None:
    """Every CompiledGraph call and MAX execute from now on marks ``stamps``."""
    from torch_max_backend.runtime.compiled_graph import CompiledGraph

    call = CompiledGraph.__call__
    names: dict[int, str] = {}
    last: dict[int, list[torch.Tensor]] = {}

    def name_of(graph: CompiledGraph) -> str:
        return names.setdefault(id(graph), f"g{len(names)}")

    def timed_call(self: CompiledGraph, args: list) -> list:
        name = name_of(self)
        execute, sharing = self._run
        if execute is not None and not getattr(execute, "_stamped", False):

            def stamped(buffers: Any, _run: Callable = execute) -> Any:
                stamps.mark(f"{name} execute")
                if stamps.replay and id(self) in last:
                    out = last[id(self)]
                else:
                    out = _run(buffers)
                    last[id(self)] = out
                stamps.mark(f"{name} execute end")
                return out

            stamped._stamped = True  # type: ignore[attr-defined]
            self._run = (stamped, sharing)
        stamps.mark(f"{name} call")
        try:
            return call(self, args)
        finally:
            stamps.mark(f"{name} call end")

    CompiledGraph.__call__ = timed_call  # type: ignore[method-assign]


def _segments(points: list[tuple[str, float]]) -> dict[str, float]:
    """Milliseconds of each named segment of one step."""
    out: dict[str, float] = {}
    for (a, ta), (b, tb) in itertools.pairwise(points):
        if a.endswith(" call") and b.endswith(" execute"):
            key = f"{a[:-5]}: our call path"
        elif a.endswith(" execute") and b.endswith(" execute end"):
            key = f"{a[:-8]}: MAX execute"
        elif a.endswith(" execute end") and b.endswith(" call end"):
            key = f"{a[:-12]}: our call path"
        else:
            key = f"between {a} and {b}"
        out[key] = out.get(key, 0.0) + (tb - ta) * 1e3
    return out


def split(
    case: str, steps: int = 300, replay: bool = False, traced_backward: bool = False
) -> dict[str, Any]:
    """Median milliseconds of each segment of ``case``'s compiled step."""
    with torch._dynamo.config.patch(trace_autograd_ops=traced_backward):
        return _split(case, steps, replay, traced_backward)


def _split(
    case: str, steps: int, replay: bool, traced_backward: bool
) -> dict[str, Any]:
    torch.manual_seed(0)
    model, x, y, stepper = cases._training_case(case)
    model.train()
    stamps = _Stamps()
    _instrument(stamps)
    from torch_max_backend import wait_compiled

    fn = cases._compile(stepper(model, x, y, traced_backward), "max")
    fn()
    wait_compiled()
    for _ in range(5):
        fn()
    stamps.replay = replay
    per_segment: dict[str, list[float]] = defaultdict(list)
    for _ in range(steps):
        stamps.points.clear()
        stamps.mark("step")
        fn()
        stamps.mark("step end")
        for key, ms in _segments(stamps.points).items():
            per_segment[key].append(ms)
        per_segment["whole step"].append(
            (stamps.points[-1][1] - stamps.points[0][1]) * 1e3
        )
    return {key: statistics.median(v) for key, v in per_segment.items()}


def describe(case: str, figures: dict[str, float], replay: bool) -> list[str]:
    step = figures["whole step"]
    between = sum(v for k, v in figures.items() if k.startswith("between"))
    execute = sum(v for k, v in figures.items() if k.endswith("MAX execute"))
    lines = [
        f"{case}{' (replayed: MAX not run)' if replay else ''}: step {step:.3f} ms"
        f" (medians), MAX execute {execute:.3f} ms, between graphs {between:.3f} ms"
    ]
    for key, ms in figures.items():
        if key != "whole step":
            lines.append(f"  {key:<40} {ms:8.3f} ms")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=TRAINING, default="mlp-train")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--traced-backward", action="store_true")
    args = parser.parse_args()
    figures = split(args.model, args.steps, args.replay, args.traced_backward)
    name = args.model + (" (backward traced)" if args.traced_backward else "")
    print("\n".join(describe(name, figures, args.replay)))


if __name__ == "__main__":
    main()
