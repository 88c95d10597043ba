"""The benchmark suite: eager PyTorch, Inductor and max_backend side by side.

    python -m benchmarks.run                       # everything (about N min here)
    python -m benchmarks.run --models mlp,bert --caches user --runs 10
    python -m benchmarks.run --docs                # also rewrite docs/benchmarks.md
    python -m benchmarks.run --repeat 3            # each row the median of 3 processes

For every model of the zoo and every backend, one fresh process measures:
the first call (the cold compile: caches emptied with ``--caches cold``, the
default), steady-state latency after warm-up (median, p10, p90), throughput,
the process's peak memory and the largest difference from eager PyTorch's
output; a second fresh process over the caches the first one filled measures
the warm compile. Then a micro-benchmark times the per-call overhead of a tiny
compiled graph against MAX's own execute. With ``--repeat N`` the steady
state is measured in N fresh processes per row, the backends taking turns
round by round (each round starting with the next), and the row is the
median process: a VM whose speed drifts by half from one process to the
next (docs/benchmarks.md) otherwise decides a ratio by which backend drew
the slow minute. Results: a table on the terminal,
JSON (``--json``), and with ``--docs`` this CPU vendor's section of
docs/benchmarks.md and its chart, docs/speedup-<vendor>.png. With
``--device cuda`` the models, inputs and optimizer state live on the GPU
(every clock read after torch.cuda.synchronize()), and ``--docs`` writes the
GPU's section (docs/speedup-gpu.png), leaving the CPU vendors' alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmarks import bandwidth, cases, device, report
from benchmarks.child import ChildFailed, cache_env, child_json, turn_order
from benchmarks.docs_sections import command_line, vendor_label
from benchmarks.machine import cpu_line, machine, product_timings_carried

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("eager", "inductor", "max")


def _child(
    case: str,
    backend: str,
    runs: int,
    seconds: float,
    warm: bool,
    where: str,
    traced_backward: bool,
    dtype: str,
) -> None:
    """Measure one case on one backend in this (fresh) process; print JSON."""
    figures = cases.measure(
        case,
        backend,
        runs=runs,
        max_seconds=seconds,
        first_call_only=warm,
        device=where,
        traced_backward=traced_backward,
        dtype=dtype,
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


def _steady_state(processes: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the same case and backend measured in several processes:
    the first's compile figures, the median process's latency."""
    row = dict(processes[0])
    if len(processes) == 1 or "median_ms" not in row:
        return row
    medians = [p["median_ms"] for p in processes]
    for key in ("median_ms", "p10_ms", "p90_ms"):
        row[key] = statistics.median(p[key] for p in processes)
    row["throughput_per_s"] *= processes[0]["median_ms"] / row["median_ms"]
    row["runs"] = sum(p.get("runs", 0) for p in processes)
    row["max_abs_error"] = max(p["max_abs_error"] for p in processes)
    row["peak_rss_mib"] = max(p["peak_rss_mib"] for p in processes)
    row["process_medians_ms"] = medians
    return row


def measure(case: str, backends: list[str], args: argparse.Namespace) -> list[dict]:
    """Every backend's row of ``case``: ``args.repeat`` rounds of fresh
    processes, each backend once a round (the first round compiles, over
    empty caches with ``--caches cold``; later ones load what it stored),
    then one more process per compiled backend for the warm compile."""
    child = ["--runs", str(args.runs), "--seconds", str(args.seconds)]
    child += device.child_args(args.device)
    if args.traced_backward:
        child.append("--traced-backward")
    child += ["--dtype", args.dtype]
    cold = args.caches == "cold"
    processes: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        caches: dict[str, Path | None] = {}
        for backend in backends:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-"))
            caches[backend] = Path(tmp) if cold else None
            # Product timings are the CPU's: a GPU run has none to carry.
            cpu = args.device == "cpu"
            stack.enter_context(
                product_timings_carried(caches[backend] if cpu else None)
            )
        for round_index in range(args.repeat):
            for backend in turn_order(backends, round_index):
                if backend in failed:
                    continue
                argv = ["--child", case, backend, *child]
                try:
                    processes[backend].append(
                        _spawn(argv, cache_env(caches[backend]), args.timeout)
                    )
                except CaseFailed as e:
                    failed[backend] = str(e)
        rows = []
        for backend in backends:
            try:
                if backend in failed:
                    raise CaseFailed(failed[backend])
                row = _steady_state(processes[backend])
                if backend != "eager":
                    argv = ["--child", case, backend, *child, "--warm"]
                    warm = _spawn(argv, cache_env(caches[backend]), args.timeout)
                    row["warm_first_call_s"] = warm["first_call_s"]
            except CaseFailed as e:
                row = {"case": case, "backend": backend, "error": str(e)}
            row["caches"] = args.caches
            rows.append(row)
    return rows


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    """Per-call overhead of a tiny 2-input graph, in its own process."""
    return _spawn(["--overhead"], cache_env(None), args.timeout)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
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
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="fresh processes per row, the backends taking turns; the row is "
        "their median (a machine whose speed drifts needs 3 or more)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--docs", action="store_true", help="rewrite docs/benchmarks.md and the chart"
    )
    device.add_argument(parser)
    parser.add_argument("--child", nargs=2, metavar=("CASE", "BACKEND"))
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument(
        "--traced-backward",
        action="store_true",
        help="training steps with their backward traced into the forward's "
        "graph (torch._dynamo.config.trace_autograd_ops), for every backend",
    )
    parser.add_argument(
        "--dtype",
        choices=list(cases.DTYPES),
        default="float32",
        help="the models' parameters and floating inputs in this type, for "
        "every backend (default float32, the docs' tables)",
    )
    args = parser.parse_args(argv)

    if args.child:
        _child(
            *args.child,
            args.runs,
            args.seconds,
            args.warm,
            args.device,
            args.traced_backward,
            args.dtype,
        )
        return
    if args.overhead:
        from benchmarks.call_overhead import measure as measure_overhead

        print(json.dumps(measure_overhead(params=0, runs=2000)), flush=True)
        return

    if args.repeat < 1:
        parser.error(f"--repeat must be 1 or more, not {args.repeat}")
    if args.traced_backward and args.docs:
        # docs/benchmarks.md's tables are the default settings'.
        parser.error("--traced-backward does not rewrite the docs: drop --docs")
    if args.dtype != "float32" and args.docs:
        parser.error(f"--dtype {args.dtype} does not rewrite the docs: drop --docs")
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

    device.check_available(parser, args.device)

    start = time.perf_counter()
    here = machine()
    if args.device == "cuda":
        # The CPU's memory bandwidth bounds nothing the GPU runs.
        print(
            f"machine: {cpu_line(here)}; GPU: {device.gpu_line(here)}; "
            f"vendor BLAS: {here['vendor_blas']}",
            flush=True,
        )
    else:
        read = bandwidth.measure()
        here["read_gbps"] = round(read["gbps"], 1)
        print(
            f"machine: {cpu_line(here)}; memory read {read['gbps']:.1f} GB/s; "
            f"vendor BLAS: {here['vendor_blas']}",
            flush=True,
        )
    rows = []
    for name in models:
        for row in measure(name, backends, args):
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    # The tiny graph's overhead is a CPU figure, for the CPU vendors' targets.
    call = overhead(args) if args.device == "cpu" else None
    results = {
        "machine": here,
        "command": command_line("benchmarks.run", argv),
        "repeat": args.repeat,
        "duration_s": time.perf_counter() - start,
        "rows": rows,
        "overhead": call,
    }
    if args.device != "cpu":
        results["device"] = args.device
    if args.traced_backward:
        results["traced_backward"] = True
    if args.dtype != "float32":
        results["dtype"] = args.dtype
    print(tabulate(report.table(rows), headers=report.HEADERS, tablefmt="simple"))
    print()
    if args.device == "cpu":
        targets = report.targets(rows, call, vendor_label(here))
        print(tabulate(targets, headers=report.TARGET_HEADERS))
    else:
        print("performance targets: the CPU vendors' alone")
    print(f"\nduration: {results['duration_s'] / 60:.1f} min")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.docs:
        report.write_docs(results, ROOT / "docs")
    return results


if __name__ == "__main__":
    main()
