"""Compile time of the model zoo: max_backend beside Inductor, cold and warm.

    python -m benchmarks.compile_time [--models mlp,resnet18,gpt2-2layer]
        [--backends max,inductor] [--json FILE] [--markdown FILE]

Each measurement runs in a fresh process with its own cache directory, so
that nothing compiled by an earlier measurement (or by the user) helps:

- cold: empty caches (MAX's graph and kernel caches, or Inductor's).
- kernels cached (max only): compiled graphs removed (MAX's graph cache and
  the artifacts torch-max-backend saves), MAX's kernel caches kept; the difference to cold is the time MAX spends compiling kernels.
- warm: a new process over the caches the earlier runs filled: what a user
  pays at every start once a model has been compiled once. ``--warm-only``
  measures just this, over the user's own caches.

A run's "first call" is compiling plus one execution; the breakdown splits a
max_backend first call into tracing (Dynamo and AOTAutograd), building the
MAX graphs (ours) and MAX's compile or cache load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmarks.child import ChildFailed, child_json

DEFAULT_MODELS = "mlp,resnet18,gpt2-2layer"


def _child(model_name: str, backend: str) -> dict[str, Any]:
    """Compile and run one model once; the figures as a dict (child process)."""
    import torch

    from benchmarks.zoo import build

    model, inputs = build(model_name)
    with torch.no_grad():
        expected = model(*inputs)
        if backend == "max":
            from torch_max_backend import compile_stats, max_backend

            compiled = torch.compile(model, backend=max_backend)
        else:
            compiled = torch.compile(model)
        start = time.perf_counter()
        got = compiled(*inputs)
        first = time.perf_counter() - start
        start = time.perf_counter()
        compiled(*inputs)
        steady = time.perf_counter() - start
    result: dict[str, Any] = {
        "first_call_s": first,
        "steady_call_s": steady,
        "max_abs_error": float((got - expected).abs().max()),
    }
    if backend == "max":
        stats = compile_stats()
        result.update(
            graphs=stats.graphs_built,
            max_compiles=stats.max_compiles,
            disk_cache_hits=stats.disk_cache_hits,
            build_s=stats.build_seconds,
            max_compile_s=stats.compile_seconds,
        )
    return result


def _run(
    model: str, backend: str, cache: Path | None, timeout: float
) -> dict[str, Any]:
    env = dict(os.environ)
    if cache is None:
        pass  # the user's own caches
    elif backend == "max":
        env["MODULAR_DERIVED_PATH"] = str(cache)
    else:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
    start = time.perf_counter()
    try:
        figures = child_json(
            ["-m", "benchmarks.compile_time", "--child", model, backend],
            env=env,
            timeout=timeout,
        )
    except ChildFailed as e:
        raise SystemExit(
            f"{backend} on {model} failed (exit {e.returncode}):\n{e.stderr[-3000:]}"
        ) from e
    figures["process_s"] = time.perf_counter() - start
    return figures


def measure(
    model: str, backend: str, timeout: float, warm_only: bool = False
) -> list[dict[str, Any]]:
    """The cold, (kernels cached,) and warm runs of one model on one backend."""
    rows = []
    if warm_only:
        _run(model, backend, None, timeout)  # compiled once, if not already
        figures = _run(model, backend, None, timeout)
        figures.update(model=model, backend=backend, stage="warm")
        print(json.dumps(figures), flush=True)
        return [figures]
    with tempfile.TemporaryDirectory(prefix="compile-bench-") as tmp:
        cache = Path(tmp)
        stages = (
            ["cold", "kernels cached", "warm"] if backend == "max" else ["cold", "warm"]
        )
        for stage in stages:
            if stage == "kernels cached":
                # Compiled graphs go (MAX's and the ones we save), kernels stay.
                for part in (".max_cache", "torch_max_backend"):
                    shutil.rmtree(cache / "cache" / part, ignore_errors=True)
            figures = _run(model, backend, cache, timeout)
            figures.update(model=model, backend=backend, stage=stage)
            print(json.dumps(figures), flush=True)
            rows.append(figures)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def seconds(row: dict[str, Any], key: str) -> str:
        return f"{row[key]:.2f}" if key in row else "-"

    lines = []
    for row in rows:
        trace = "-"
        if row["backend"] == "max":
            rest = row["first_call_s"] - row["build_s"] - row["max_compile_s"]
            trace = f"{max(rest - row['steady_call_s'], 0.0):.2f}"
        lines.append(
            [
                row["model"],
                row["backend"],
                row["stage"],
                seconds(row, "first_call_s"),
                trace,
                seconds(row, "build_s"),
                seconds(row, "max_compile_s"),
                row.get("max_compiles", "-"),
                f"{row['max_abs_error']:.1e}",
            ]
        )
    return tabulate(
        lines,
        headers=[
            "model",
            "backend",
            "caches",
            "first call s",
            "trace s",
            "build s",
            "MAX compile s",
            "MAX compiles",
            "max |err|",
        ],
        tablefmt="github",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "BACKEND"))
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--backends", default="max,inductor")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument(
        "--warm-only",
        action="store_true",
        help="only a fresh process over the user's own, filled caches",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    rows: list[dict[str, Any]] = []
    for model in args.models.split(","):
        for backend in args.backends.split(","):
            rows += measure(model, backend, args.timeout, args.warm_only)
    text = table(rows)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
