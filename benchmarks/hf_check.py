"""One architecture of the model check: inference and a training step, MAX against eager.

``python -m benchmarks.hf_check NAME [--precision fp32|bf16|autocast]`` builds
the architecture twice from one seed, runs it in eval mode without gradients
(eager, then ``torch.compile(backend="max")``), then two full training steps
in train mode (zero_grad, forward, backward, AdamW step; the whole step
compiled) on both, with the default settings but for ``OPTIONS``, and prints
one JSON line: per phase the status, the largest difference, the MAX graphs,
fallback ops, first-call seconds and the seconds spent in MAX's compiler.

By default the AdamW step's graph compiles in the background while its first
calls run in PyTorch, so the first step is timed as a user waits for it
(the training phase's ``first_call_s``); the check then waits for every compile
(``all_on_max_s``: from the first step's start) and compares a second step,
which must run every graph on MAX: outputs and gradients of both steps, then
parameters and buffers after the second, so MAX's update is what is checked.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import torch

from benchmarks.hf_architectures import Architecture, build, by_name

# (rtol, atol) per precision: float32 reorders reductions only; bfloat16 has
# 8 bits of mantissa, and autocast runs the matmuls in it.
TOLERANCE = {"fp32": (1e-3, 1e-3), "bf16": (5e-2, 5e-2), "autocast": (3e-2, 3e-2)}
_FALLBACK_OP = re.compile(r"(aten\.[\w.]+|[\w.]+\.default) x(\d+) \(([^)]*)\)")
# The defaults, but for the matmul versions of graphs built with summed
# products (pipeline/product_upgrade.py): they compile later at the lowest
# priority and change no first call, and waiting for them would hold each
# check for minutes (and count their compiles, which no step waits for).
OPTIONS = {"upgrade_products": False}
# A whole graph MAX could not take (backend.py's message): no op is named.
_FALLBACK_GRAPH = re.compile(r"graph (\S+) runs in PyTorch: (.*?)(?: Pass options=|$)")


def tensors(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a model's output, with a path naming it."""
    if isinstance(value, torch.Tensor):
        yield prefix or "output", value
    elif isinstance(value, dict):  # ModelOutput is a dict too
        for key, item in value.items():
            yield from tensors(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from tensors(item, f"{prefix}[{i}]")


class Comparison:
    """The largest difference seen and the first value out of tolerance."""

    def __init__(self, rtol: float, atol: float) -> None:
        self.rtol, self.atol = rtol, atol
        self.max_diff = 0.0
        self.first_mismatch: str | None = None

    def add(
        self, name: str, got: torch.Tensor | None, expected: torch.Tensor | None
    ) -> None:
        if got is None or expected is None:
            if (got is None) != (expected is None):
                self._mismatch(f"{name}: None on one side only")
            return
        if got.shape != expected.shape or got.dtype != expected.dtype:
            self._mismatch(
                f"{name}: {tuple(got.shape)} {got.dtype} against eager's "
                f"{tuple(expected.shape)} {expected.dtype}"
            )
            return
        if not got.is_floating_point():
            if not torch.equal(got, expected):
                self._mismatch(f"{name}: integer values differ")
            return
        got, expected = got.detach().double(), expected.detach().double()
        diff = (got - expected).abs().nan_to_num(nan=float("inf"))
        if diff.numel():
            self.max_diff = max(self.max_diff, diff.max().item())
        try:
            torch.testing.assert_close(got, expected, rtol=self.rtol, atol=self.atol)
        except AssertionError as e:
            self._mismatch(f"{name}: {str(e).splitlines()[1].strip()}")

    def fail(self, what: str) -> None:
        """Fails the phase for a reason other than a value's difference."""
        self._mismatch(what)

    def _mismatch(self, what: str) -> None:
        self.first_mismatch = self.first_mismatch or what

    def result(self) -> dict[str, Any]:
        return {
            "status": "pass" if self.first_mismatch is None else "mismatch",
            "max_diff": self.max_diff,
            "detail": self.first_mismatch or "",
        }


def _fallback_ops(caught: list[warnings.WarningMessage]) -> dict[str, str]:
    from torch_max_backend import FallbackWarning

    ops: dict[str, str] = {}
    for w in caught:
        if issubclass(w.category, FallbackWarning):
            text = str(w.message)
            named = _FALLBACK_OP.findall(text)
            for op, _count, reason in named:
                ops[op] = reason
            # Any other fallback still fails the row: it is named by its graph.
            whole = _FALLBACK_GRAPH.search(text)
            if whole:
                ops[f"graph {whole[1]}"] = whole[2][:200]
            elif not named:
                ops["unrecognised fallback"] = text[:200]
    return ops


def _graphs() -> int:
    from torch_max_backend import compile_stats

    stats = compile_stats()
    return stats.max_compiles + stats.cache_hits + stats.warm_starts


def _compile_seconds() -> float:
    """Seconds in MAX's compiler and loader in this phase (summed over its
    graphs): where a first call's time goes on an empty cache."""
    from torch_max_backend import compile_stats

    return round(compile_stats().compile_seconds, 1)


def _step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, inputs: dict
) -> Any:
    optimizer.zero_grad()
    out = model(**inputs)
    out.loss.backward()
    optimizer.step()
    return out


def _run_phase(run: Any, comparison: Comparison) -> dict[str, Any]:
    from torch_max_backend import reset_compile_stats

    reset_compile_stats()
    notes: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.perf_counter()
        try:
            run(comparison, notes)
        except Exception as e:
            lines = [line for line in str(e).splitlines() if line.strip()]
            first = lines[0] if lines else ""
            return {
                "status": "error",
                "max_diff": None,
                "detail": f"{type(e).__name__}: {first}"[:400],
                "traceback": traceback.format_exc()[-3000:],
                "graphs": _graphs(),
                "fallback_ops": _fallback_ops(caught),
            }
        seconds = time.perf_counter() - started
    return {
        **comparison.result(),
        "graphs": _graphs(),
        "fallback_ops": _fallback_ops(caught),
        "first_call_s": round(seconds, 1),
        "compile_s": _compile_seconds(),
        # A phase may time its first call itself (the training step's,
        # before it waits for the background compiles).
        **notes,
    }


def check(arch: Architecture, precision: str = "fp32") -> dict[str, Any]:
    """Both phases of one architecture at one precision."""
    eager, inputs = build(arch)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    eager = eager.to(dtype)
    inputs = {
        k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in inputs.items()
    }
    ours = copy.deepcopy(eager)
    autocast = (
        (lambda: torch.autocast("cpu", dtype=torch.bfloat16))
        if precision == "autocast"
        else nullcontext
    )
    rtol, atol = TOLERANCE[precision]

    def inference(comparison: Comparison, notes: dict[str, Any]) -> None:
        eager.eval(), ours.eval()
        with torch.no_grad(), autocast():
            expected = eager(**inputs)
            got = torch.compile(ours, backend="max", options=OPTIONS)(**inputs)
        for (name, g), (_, e) in zip(tensors(got), tensors(expected), strict=True):
            comparison.add(f"output {name}", g, e)

    def training(comparison: Comparison, notes: dict[str, Any]) -> None:
        from torch_max_backend import compile_stats, wait_compiled

        eager.train(), ours.train()
        eager_opt = torch.optim.AdamW(eager.parameters(), lr=1e-3)
        our_opt = torch.optim.AdamW(ours.parameters(), lr=1e-3)
        compiled_step = torch.compile(_step, backend="max", options=OPTIONS)

        def both_steps() -> tuple[Any, Any, int, float]:
            """A step of eager's, then of ours: their outputs, how many of our
            graph calls ran in PyTorch, and when our step started."""
            with autocast():
                expected = _step(eager, eager_opt, inputs)
                before = compile_stats().eager_calls
                started = time.perf_counter()
                got = compiled_step(ours, our_opt, inputs)
            return got, expected, compile_stats().eager_calls - before, started

        got, expected, _, started = both_steps()
        notes["first_call_s"] = round(time.perf_counter() - started, 1)
        wait_compiled()
        notes["all_on_max_s"] = round(time.perf_counter() - started, 1)
        _compare_step(comparison, "step 1", got, expected)
        got, expected, ran_in_pytorch, _ = both_steps()
        if ran_in_pytorch:
            # The second step must check MAX's graphs, not PyTorch's.
            comparison.fail(f"{ran_in_pytorch} graph call(s) ran in PyTorch")
        _compare_step(comparison, "step 2", got, expected)
        for (name, p), e in zip(
            ours.named_parameters(), eager.parameters(), strict=True
        ):
            comparison.add(f"parameter {name} after two steps", p, e)
        for (name, b), e in zip(ours.named_buffers(), eager.buffers(), strict=True):
            comparison.add(f"buffer {name} after two steps", b, e)

    def _compare_step(
        comparison: Comparison, step: str, got: Any, expected: Any
    ) -> None:
        for (name, g), (_, e) in zip(tensors(got), tensors(expected), strict=True):
            comparison.add(f"{step} output {name}", g, e)
        pairs = zip(ours.named_parameters(), eager.parameters(), strict=True)
        for (name, p), e in pairs:
            comparison.add(f"{step} gradient {name}", p.grad, e.grad)

    return {
        "name": arch.name,
        "kind": arch.kind,
        "precision": precision,
        "inference": _run_phase(inference, Comparison(rtol, atol)),
        "training": _run_phase(training, Comparison(rtol, atol)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name")
    parser.add_argument("--precision", choices=sorted(TOLERANCE), default="fp32")
    args = parser.parse_args(argv)
    print(json.dumps(check(by_name(args.name), args.precision)), flush=True)


if __name__ == "__main__":
    main()
