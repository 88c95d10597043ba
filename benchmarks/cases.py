"""The benchmark suite's cases and how one case is measured on one backend.

Inference cases come from the zoo; the ``-train`` cases are whole training
steps (forward, cross-entropy, backward, optimizer step; zero_grad first)
compiled as one function, the way the training examples use the backend:
the MLP with SGD and momentum, GPT-2 (6 layers) and ResNet-18 with AdamW.
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
from benchmarks.device import synchronize

# name -> what the table says about it
CASES: dict[str, str] = {
    "mlp": "MLP, batch 64, hidden 1024, 3 layers",
    "resnet18": "ResNet-18, 1x3x224x224",
    "gpt2": "GPT-2 small (12 layers), 1x128, use_cache=False",
    "bert": "BERT-base, 1x128",
    "gemma": "Gemma-3-style decoder (Gemma 3 270M width, 6 layers), 1x128",
    "mlp-train": "MLP training step (SGD, momentum), batch 64, hidden 1024",
    "gpt2-train": "GPT-2 small (6 layers) training step (AdamW), 1x128",
    "resnet18-train": "ResNet-18 training step (AdamW), 2x3x112x112",
}

# The types a case's model and floating inputs may run in (--dtype): float32,
# the tables' own, or bfloat16, whose products take other forms on the CPU.
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _compile(fn: Callable[..., Any], backend: str) -> Callable[..., Any]:
    if backend == "eager":
        return fn
    if backend == "inductor":
        return torch.compile(fn)
    from torch_max_backend import max_backend

    return torch.compile(fn, backend=max_backend)


# Warm-up before the timed calls: three calls, and at least this long. A
# compiled backend's process runs its first calls slower: in fresh
# processes of the MLP (2 ms a call), blocks of 30 calls right after the
# first took 1.74-2.11 ms on max (6.99 once), then 1.56-1.75; on Inductor
# 1.89-2.43, then 1.72-1.90; eager's first block was as its others
# (Intel Xeon, 2026-12-02).
WARMUP_S = 0.5


def _latencies(
    call: Callable[[], object], runs: int, max_seconds: float, device: str = "cpu"
) -> list[float]:
    """Seconds per call once warmed up (three calls and ``WARMUP_S``):
    ``runs`` calls, fewer if they would take longer than ``max_seconds``
    (at least five). On a GPU each clock is read once its work is done."""
    warm_until = time.perf_counter() + WARMUP_S
    for _ in range(3):
        call()
    while time.perf_counter() < warm_until:
        call()
    times: list[float] = []
    synchronize(device)
    budget_end = time.perf_counter() + max_seconds
    while len(times) < runs and (len(times) < 5 or time.perf_counter() < budget_end):
        synchronize(device)
        start = time.perf_counter()
        call()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def _timed_call(call: Callable[[], Any], device: str) -> tuple[Any, float]:
    """``call()``'s result and its seconds, its device work included."""
    synchronize(device)
    start = time.perf_counter()
    out = call()
    synchronize(device)
    return out, time.perf_counter() - start


def _in_type(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A floating input in ``dtype``; ids and labels as they are."""
    return x.to(dtype) if x.is_floating_point() else x


def _inference(
    name: str,
    backend: str,
    runs: int,
    max_seconds: float,
    first_call_only: bool,
    device: str = "cpu",
    *,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    model, inputs = zoo.build(name)
    model = model.to(device=device, dtype=dtype)
    inputs = tuple(_in_type(x, dtype).to(device) for x in inputs)
    with torch.no_grad():
        expected = model(*inputs)
        fn = _compile(model, backend)
        out, first = _timed_call(lambda: fn(*inputs), device)
        figures: dict[str, Any] = {"first_call_s": first}
        if first_call_only:
            return figures
        figures["latencies_s"] = _latencies(
            lambda: fn(*inputs), runs, max_seconds, device
        )
    figures["max_abs_error"] = float((out.float() - expected.float()).abs().max())
    figures["batch"] = int(inputs[0].shape[0])
    return figures


def _stepper(
    net: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    traced_backward: bool,
) -> Callable[[], torch.Tensor]:
    """One training step of ``net`` on ``(x, y)``: cross-entropy over the
    last dim of its output.

    ``traced_backward``: the loss is detached before ``backward()`` and
    nothing that backward consumed outlives it, as Dynamo's traced backward
    (``torch._dynamo.config.trace_autograd_ops``) asks: a tensor whose graph
    ``backward()`` freed, still referenced at the optimizer's graph break,
    makes Dynamo break the graph at ``backward()`` instead."""

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        out = net(x)
        if out.dim() > 2:  # a language model's logits: one row per token
            out, targets = out.reshape(-1, out.shape[-1]), y.reshape(-1)
        else:
            targets = y
        loss = F.cross_entropy(out, targets)
        if traced_backward:
            value = loss.detach()
            loss.backward()
            del loss, out
            optimizer.step()
            return value
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def sgd_momentum_stepper(
    net: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    traced_backward: bool = False,
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
    return _stepper(net, optimizer, x, y, traced_backward)


def adamw_stepper(
    net: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    traced_backward: bool = False,
) -> Callable[[], torch.Tensor]:
    """One training step of ``net`` on ``(x, y)``: AdamW."""
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    # As SGD's buffers above: AdamW's state from zero moments at step 0 is
    # what its first step creates, so every step runs one program.
    for p in net.parameters():
        optimizer.state[p].update(
            step=torch.tensor(0.0),
            exp_avg=torch.zeros_like(p),
            exp_avg_sq=torch.zeros_like(p),
        )
    return _stepper(net, optimizer, x, y, traced_backward)


def gpt2_for_training(layers: int = 6) -> tuple[torch.nn.Module, torch.Tensor]:
    """GPT-2 small's first ``layers`` layers with dropout off (max's steps
    are compared with eager's, draw for draw), and a 1x128 batch of ids."""
    model, (ids,) = zoo.gpt2(layers=layers)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model, ids


def _training_case(
    case: str,
) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, Any]:
    """The model, its input and targets, and the stepper of a ``-train`` case."""
    if case == "gpt2-train":
        model, ids = gpt2_for_training()
        # Next-token targets: the inputs shifted by one, the last wrapped.
        return model, ids, ids.roll(-1, dims=1), adamw_stepper
    if case == "resnet18-train":
        model, (x,) = zoo.resnet18(batch=2, size=112)
        return model, x, torch.randint(0, 1000, (x.shape[0],)), adamw_stepper
    if case == "mobilenetv2-train":  # time_to_max's only: its compile is long
        model, (x,) = zoo.mobilenet_v2()
        return model, x, torch.randint(0, 10, (x.shape[0],)), adamw_stepper
    model, (x,) = zoo.build("mlp")
    return model, x, torch.randint(0, 10, (x.shape[0],)), sgd_momentum_stepper


def _training(
    case: str,
    backend: str,
    runs: int,
    max_seconds: float,
    first_call_only: bool,
    device: str = "cpu",
    traced_backward: bool = False,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    # Dynamo reads the flag while it traces: at the first calls, and at any
    # later trace (a recompile), so it holds for the whole measurement.
    with torch._dynamo.config.patch(trace_autograd_ops=traced_backward):
        return _training_steps(
            case,
            backend,
            runs,
            max_seconds,
            first_call_only,
            device,
            traced_backward,
            dtype,
        )


def _training_steps(
    case: str,
    backend: str,
    runs: int,
    max_seconds: float,
    first_call_only: bool,
    device: str,
    traced_backward: bool,
    dtype: torch.dtype,
) -> dict[str, Any]:
    model, x, y, stepper = _training_case(case)
    # On the device (and in the type) before the stepper makes the
    # optimizer's state there.
    model = model.to(device=device, dtype=dtype)
    x, y = _in_type(x, dtype).to(device), y.to(device)
    model.train()
    reference = copy.deepcopy(model)

    fn = _compile(stepper(model, x, y, traced_backward), backend)
    _, first = _timed_call(fn, device)
    figures: dict[str, Any] = {"first_call_s": first}
    if first_call_only:
        return figures
    if backend == "max":
        # The backward and the optimizer's step compile in the background by
        # default (their first calls run in PyTorch): the figures below are
        # MAX's steps.
        from torch_max_backend import wait_compiled

        wait_compiled()
    # Error: the parameters after three steps, against eager's three steps.
    fn(), fn()
    eager_step = stepper(reference, x, y, traced_backward)
    for _ in range(3):
        eager_step()
    figures["max_abs_error"] = max(
        float((a.float() - b.float()).abs().max())
        for a, b in zip(model.parameters(), reference.parameters(), strict=True)
    )
    figures["latencies_s"] = _latencies(fn, runs, max_seconds, device)
    figures["batch"] = int(x.shape[0])
    return figures


def measure(
    case: str,
    backend: str,
    *,
    runs: int,
    max_seconds: float,
    first_call_only: bool = False,
    device: str = "cpu",
    traced_backward: bool = False,
    dtype: str = "float32",
) -> dict[str, Any]:
    """Every figure of one case on one backend, as measured in this process,
    its model, inputs and optimizer state on ``device``; a training case's
    backward traced into its forward's graph with ``traced_backward``; the
    model's parameters and floating inputs in ``dtype`` (float32 or
    bfloat16)."""
    if case not in CASES:
        raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    if dtype not in DTYPES:
        raise SystemExit(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case.endswith("-train"):
            figures = _training(
                case,
                backend,
                runs,
                max_seconds,
                first_call_only,
                device,
                traced_backward,
                DTYPES[dtype],
            )
        else:
            figures = _inference(
                case,
                backend,
                runs,
                max_seconds,
                first_call_only,
                device,
                dtype=DTYPES[dtype],
            )
    figures.update(case=case, backend=backend)
    if dtype != "float32":
        figures["dtype"] = dtype
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
    if device == "cuda":
        figures["device"] = device
        figures["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return figures
