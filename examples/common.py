"""What every example shares: its command line, weights, timing and the verdict.

Each example builds its model with random weights (or loads ``--weights``, a
local safetensors file), runs it eagerly and compiled with max_backend on the
same inputs, prints both results and timings side by side, and returns a
non-zero exit code when they disagree.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from torch_max_backend import compile_stats


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the options every example takes."""
    text = doc or ""
    p = argparse.ArgumentParser(
        description=text.splitlines()[0] if text else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    p.add_argument(
        "--weights", type=Path, help="a local safetensors file of the model's weights"
    )
    p.add_argument("--runs", type=int, default=10, help="timed calls per backend")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    return p


def load_weights(model: torch.nn.Module, path: Path | None) -> None:
    """Load a safetensors state dict into ``model``, naming what does not fit."""
    if path is None:
        return
    from safetensors.torch import load_file

    if not path.is_file():
        raise SystemExit(f"--weights {path}: no such file")
    state = load_file(str(path))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # A tied parameter (GPT-2's output head is its embedding) is saved once.
    names_of: dict[int, set[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(param), set()).add(name)
    params = dict(model.named_parameters(remove_duplicate=False))
    missing = [
        k
        for k in missing
        if k not in params or not names_of[id(params[k])] & state.keys()
    ]
    if missing or unexpected:
        raise SystemExit(
            f"--weights {path}: does not fit {type(model).__name__}; "
            f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )


def median_ms(fn: Callable[[], object], runs: int, device: torch.device) -> float:
    """Median wall time of ``fn`` in milliseconds, after one warm-up call."""
    fn()
    times = []
    for _ in range(max(runs, 1)):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def timed_first_call(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, float]:
    """Result and seconds of the first (compiling) call."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def print_timings(eager_ms: float, max_ms: float, first_call_s: float) -> None:
    stats = compile_stats()
    print(
        f"first call with max_backend: {first_call_s:.1f} s "
        f"({stats.graphs_built + stats.warm_starts} MAX graph(s), "
        f"{stats.warm_starts} from a warm start, {stats.max_compiles} compiled)"
    )
    print(
        f"per call: eager {eager_ms:.2f} ms, max_backend {max_ms:.2f} ms "
        f"({eager_ms / max_ms:.2f}x eager)"
    )


def verdict(agree: bool, what: str) -> int:
    """Print the outcome; the exit code is 0 only when eager and MAX agree."""
    print(
        f"result: {what}: " + ("eager and max_backend agree" if agree else "MISMATCH")
    )
    return 0 if agree else 1
