"""The benchmark suite's cases and how one case is measured on one backend.

Inference cases come from the zoo; ``mlp-train`` is a whole training step
(forward, cross-entropy, backward, SGD with momentum) compiled as one
function, the way the training examples use the backend.
"""

from __future__ import annotations

import copy
import resource
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks import zoo

# name -> what the table says about it
CASES: dict[str, str] = {
    "mlp": "MLP, batch 64, hidden 1024, 3 layers",
    "resnet18": "ResNet-18, 1x3x224x224",
    "gpt2": "GPT-2 small (12 layers), 1x128, use_cache=False",
    "bert": "BERT-base, 1x128",
    "gemma": "Gemma-3-style decoder (Gemma 3 270M width, 6 layers), 1x128",
    "mlp-train": "MLP training step (SGD, momentum), batch 64, hidden 1024",
}


def _compile(fn: Callable[..., Any], backend: str) -> Callable[..., Any]:
    if backend == "eager":
        return fn
    if backend == "inductor":
        return torch.compile(fn)
    from torch_max_backend import max_backend

    return torch.compile(fn, backend=max_backend)


def _latencies(
    call: Callable[[], object], runs: int, max_seconds: float
) -> list[float]:
    """Seconds per call after three warm-up calls: ``runs`` calls, fewer if
    they would take longer than ``max_seconds`` (at least five)."""
    for _ in range(3):
        call()
    times: list[float] = []
    budget_end = time.perf_counter() + max_seconds
    while len(times) < runs and (len(times) < 5 or time.perf_counter() < budget_end):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def _inference(
    name: str, backend: str, runs: int, max_seconds: float, first_call_only: bool
) -> dict[str, Any]:
    model, inputs = zoo.build(name)
    with torch.no_grad():
        expected = model(*inputs)
        fn = _compile(model, backend)
        start = time.perf_counter()
        out = fn(*inputs)
        first = time.perf_counter() - start
        figures: dict[str, Any] = {"first_call_s": first}
        if first_call_only:
            return figures
        figures["latencies_s"] = _latencies(lambda: fn(*inputs), runs, max_seconds)
    figures["max_abs_error"] = float((out - expected).abs().max())
    figures["batch"] = int(inputs[0].shape[0])
    return figures


def sgd_momentum_stepper(
    net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor
) -> Callable[[], torch.Tensor]:
    """One training step of ``net`` on ``(x, y)``: SGD with momentum."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    # SGD creates its momentum buffers at the first step (buf = grad) and
    # updates them after (buf = 0.9 * buf + grad): two programs, so Dynamo
    # would trace the step again at step 2 and MAX compile the update
    # twice. From zero buffers the update gives the first step's
    # buf = grad exactly (dampening 0), so every step is the later one.
    for p in net.parameters():
        optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _mlp_training(
    backend: str, runs: int, max_seconds: float, first_call_only: bool
) -> dict[str, Any]:
    model, (x,) = zoo.build("mlp")
    model.train()
    y = torch.randint(0, 10, (x.shape[0],))
    reference = copy.deepcopy(model)

    fn = _compile(sgd_momentum_stepper(model, x, y), backend)
    start = time.perf_counter()
    fn()
    figures: dict[str, Any] = {"first_call_s": time.perf_counter() - start}
    if first_call_only:
        return figures
    # Error: the parameters after three steps, against eager's three steps.
    fn(), fn()
    eager_step = sgd_momentum_stepper(reference, x, y)
    for _ in range(3):
        eager_step()
    figures["max_abs_error"] = max(
        float((a - b).abs().max())
        for a, b in zip(model.parameters(), reference.parameters(), strict=True)
    )
    figures["latencies_s"] = _latencies(fn, runs, max_seconds)
    figures["batch"] = int(x.shape[0])
    return figures


def measure(
    case: str,
    backend: str,
    *,
    runs: int,
    max_seconds: float,
    first_call_only: bool = False,
) -> dict[str, Any]:
    """Every figure of one case on one backend, as measured in this process."""
    if case not in CASES:
        raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case == "mlp-train":
            figures = _mlp_training(backend, runs, max_seconds, first_call_only)
        else:
            figures = _inference(case, backend, runs, max_seconds, first_call_only)
    figures.update(case=case, backend=backend)
    if backend == "max":
        from torch_max_backend import FallbackWarning, compile_stats

        stats = compile_stats()
        figures.update(
            # Graphs lowered now or found lowered by an earlier run.
            max_graphs=stats.graphs_built + stats.warm_starts,
            max_compiles=stats.max_compiles,
            # Ops that ran in PyTorch instead of MAX would make the row a lie.
            fallbacks=sum(issubclass(w.category, FallbackWarning) for w in caught),
        )
    if "latencies_s" in figures:
        times = sorted(figures.pop("latencies_s"))
        deciles = statistics.quantiles(times, n=10) if len(times) > 1 else times * 9
        figures.update(
            runs=len(times),
            median_ms=statistics.median(times) * 1e3,
            p10_ms=deciles[0] * 1e3,
            p90_ms=deciles[-1] * 1e3,
        )
        figures["throughput_per_s"] = figures["batch"] / (figures["median_ms"] / 1e3)
    # Linux reports kilobytes: the process's peak, compiling included.
    figures["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures
