"""The benchmark suite: eager PyTorch, Inductor and max_backend side by side.

    python -m benchmarks.run                       # everything (about N min here)
    python -m benchmarks.run --models mlp,bert --caches user --runs 10
    python -m benchmarks.run --docs                # also rewrite docs/benchmarks.md

For every model of the zoo and every backend, one fresh process measures:
the first call (the cold compile: caches emptied with ``--caches cold``, the
default), steady-state latency after warm-up (median, p10, p90), throughput,
the process's peak memory and the largest difference from eager PyTorch's
output; a second fresh process over the caches the first one filled measures
the warm compile. Then a micro-benchmark times the per-call overhead of a tiny
compiled graph against MAX's own execute. Results: a table on the terminal,
JSON (``--json``), and with ``--docs`` this CPU vendor's section of
docs/benchmarks.md and its chart, docs/speedup-<vendor>.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmarks import bandwidth, cases, report
from benchmarks.child import ChildFailed, child_json
from benchmarks.docs_sections import command_line
from benchmarks.machine import cpu_line, machine, product_timings_carried

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("eager", "inductor", "max")


def _child(case: str, backend: str, runs: int, seconds: float, warm: bool) -> None:
    """Measure one case on one backend in this (fresh) process; print JSON."""
    figures = cases.measure(
        case, backend, runs=runs, max_seconds=seconds, first_call_only=warm
    )
    print(json.dumps(figures), flush=True)


class CaseFailed(Exception):
    """A child process failed; its row says so and the suite goes on."""


def _spawn(args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    try:
        return child_json(["-m", "benchmarks.run", *args], env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise CaseFailed(f"timed out after {timeout:.0f} s") from e
    except ChildFailed as e:
        lines = e.stderr.strip().splitlines() or [f"exit {e.returncode}"]
        print(e.stderr[-3000:], file=sys.stderr)
        raise CaseFailed(lines[-1][:200]) from e


def _cache_env(directory: Path | None) -> dict[str, str]:
    """The environment of a child whose compile caches live in ``directory``."""
    env = dict(os.environ)
    if directory is not None:
        env["MODULAR_DERIVED_PATH"] = str(directory)
        env["TORCHINDUCTOR_CACHE_DIR"] = str(directory / "inductor")
    return env


def measure(case: str, backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """The cold process (all figures) then the warm one (first call only)."""
    common = ["--runs", str(args.runs), "--seconds", str(args.seconds)]
    child = ["--child", case, backend, *common]
    with (
        tempfile.TemporaryDirectory(prefix="bench-") as tmp,
        product_timings_carried(Path(tmp) if args.caches == "cold" else None),
    ):
        directory = Path(tmp) if args.caches == "cold" else None
        env = _cache_env(directory)
        try:
            row = _spawn(child, env, args.timeout)
            if backend != "eager":
                warm = _spawn([*child, "--warm"], env, args.timeout)
                row["warm_first_call_s"] = warm["first_call_s"]
        except CaseFailed as e:
            row = {"case": case, "backend": backend, "error": str(e)}
    row["caches"] = args.caches
    return row


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    """Per-call overhead of a tiny 2-input graph, in its own process."""
    return _spawn(["--overhead"], _cache_env(None), args.timeout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--models", default=",".join(cases.CASES))
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument(
        "--caches",
        choices=["cold", "user"],
        default="cold",
        help="cold: each case starts from empty compile caches (default); "
        "user: the user's own caches, so compiles may be loads",
    )
    parser.add_argument("--runs", type=int, default=30, help="timed calls at most")
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="timed seconds at most per case"
    )
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--docs", action="store_true", help="rewrite docs/benchmarks.md and the chart"
    )
    parser.add_argument("--child", nargs=2, metavar=("CASE", "BACKEND"))
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--overhead", action="store_true")
    args = parser.parse_args(argv)

    if args.child:
        _child(*args.child, args.runs, args.seconds, args.warm)
        return
    if args.overhead:
        from benchmarks.call_overhead import measure as measure_overhead

        print(json.dumps(measure_overhead(params=0, runs=2000)), flush=True)
        return

    models = [m for m in args.models.split(",") if m]
    backends = [b for b in args.backends.split(",") if b]
    for name in models:
        if name not in cases.CASES:
            parser.error(
                f"unknown model {name!r}; choose from {', '.join(cases.CASES)}"
            )
    for name in backends:
        if name not in BACKENDS:
            parser.error(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")

    start = time.perf_counter()
    here = machine()
    read = bandwidth.measure()
    here["read_gbps"] = round(read["gbps"], 1)
    print(
        f"machine: {cpu_line(here)}; memory read {read['gbps']:.1f} GB/s; "
        f"vendor BLAS: {here['vendor_blas']}",
        flush=True,
    )
    rows = []
    for name in models:
        for backend in backends:
            row = measure(name, backend, args)
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    call = overhead(args)
    results = {
        "machine": here,
        "command": command_line("benchmarks.run", argv),
        "duration_s": time.perf_counter() - start,
        "rows": rows,
        "overhead": call,
    }
    print(tabulate(report.table(rows), headers=report.HEADERS, tablefmt="simple"))
    print()
    print(tabulate(report.targets(rows, call), headers=report.TARGET_HEADERS))
    print(f"\nduration: {results['duration_s'] / 60:.1f} min")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.docs:
        report.write_docs(results, ROOT / "docs")


if __name__ == "__main__":
    main()
