"""Time to first output, and until every call runs on MAX, from empty caches.

    python -m benchmarks.compile_time [--models mlp,resnet18,gpt2,bert,gemma,mlp-train]
        [--variants eager,aot_eager,max,max-parallel,max-background,max-bundle]
        [--warm] [--json FILE] [--markdown FILE]

Every row is a fresh process with an empty cache directory of its own:

- eager, aot_eager: PyTorch alone, and PyTorch's tracing alone (Dynamo and
  AOTAutograd, no compiler): what no backend can beat.
- max: one compile at a time in the user's process (``compile_workers=1``),
  the first call waiting for it, as before compile workers existed.
- max-parallel: compile workers (the default number), the first call waiting.
- max-background: ``background_compile``: calls run in PyTorch until the MAX
  graphs are ready.
- max-bundle: empty caches, then ``load_artifacts`` of a bundle packed from
  the max row's caches (the time to load it is part of the first call).
- inductor: ``torch.compile``'s default, for comparison (not by default).

*first output s* is from compiling to the first result; *all on MAX s* until
no compile is pending (for mlp-train: three training steps, then waiting);
*peak RSS* is the user's process, *with workers* adds its compile workers'
memory (sampled every 0.2 s). ``--warm`` adds, per max variant, a second
process over the caches the first one filled.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmarks.child import ROOT, ChildFailed, child_json

DEFAULT_MODELS = "mlp,resnet18,gpt2,bert,gemma,mlp-train"
DEFAULT_VARIANTS = "eager,aot_eager,max,max-parallel,max-background,max-bundle"
TRAINING_STEPS = 3

# variant -> environment of its child process
_ENV = {
    "max": {"TORCH_MAX_BACKEND_COMPILE_WORKERS": "1"},
    "max-parallel": {},
    "max-background": {"TORCH_MAX_BACKEND_BACKGROUND_COMPILE": "1"},
    "max-bundle": {},
}


class _MemorySampler:
    """The highest resident memory of this process plus its descendants (the
    compile workers), read from /proc every ``interval`` seconds."""

    def __init__(self, interval: float = 0.2) -> None:
        self.peak_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def __enter__(self) -> _MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.peak_total = max(self.peak_total, _tree_rss(os.getpid()))


def _tree_rss(root: int) -> int:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def _compiled(fn: Any, variant: str) -> Any:
    import torch

    if variant == "eager":
        return fn
    if variant in ("aot_eager", "inductor"):
        return torch.compile(fn, backend=variant)
    return torch.compile(fn, backend="max")


def _training(variant: str) -> tuple[dict[str, Any], float]:
    """Three SGD-with-momentum steps of the suite's MLP; figures and error."""
    import torch

    from benchmarks.cases import sgd_momentum_stepper
    from benchmarks.zoo import build

    model, (x,) = build("mlp")
    model.train()
    y = torch.randint(0, 10, (x.shape[0],))
    reference = copy.deepcopy(model)

    fn = _compiled(sgd_momentum_stepper(model, x, y), variant)
    start = time.perf_counter()
    fn()
    figures = {"first_output_s": time.perf_counter() - start}
    for _ in range(TRAINING_STEPS - 1):
        fn()
    figures["steps_s"] = time.perf_counter() - start
    figures["all_on_max_s"] = _until_compiled(variant, start)
    eager_step = sgd_momentum_stepper(reference, x, y)
    for _ in range(TRAINING_STEPS):
        eager_step()
    error = max(
        float((a - b).abs().max())
        for a, b in zip(model.parameters(), reference.parameters(), strict=True)
    )
    return figures, error


def _inference(model_name: str, variant: str) -> tuple[dict[str, Any], float]:
    import torch

    from benchmarks.zoo import build

    model, inputs = build(model_name)
    with torch.no_grad():
        expected = model(*inputs)
        fn = _compiled(model, variant)
        start = time.perf_counter()
        got = fn(*inputs)
        figures = {"first_output_s": time.perf_counter() - start}
        figures["all_on_max_s"] = _until_compiled(variant, start)
        after = fn(*inputs)  # on MAX now
    error = max(
        float((got - expected).abs().max()), float((after - expected).abs().max())
    )
    return figures, error


def _until_compiled(variant: str, start: float) -> float | None:
    if not variant.startswith("max"):
        return None
    from torch_max_backend import wait_compiled

    assert wait_compiled(timeout=3600)
    return time.perf_counter() - start


def _child(model: str, variant: str, bundle: str | None) -> dict[str, Any]:
    # Imported before any clock starts, in every variant: the figures are
    # what a program that has imported its libraries waits for.
    import torch  # noqa: F401

    import torch_max_backend  # noqa: F401

    with _MemorySampler() as memory:
        start = time.perf_counter()
        loaded = None
        if bundle:
            from torch_max_backend import load_artifacts

            loaded = load_artifacts(bundle)
        load_s = time.perf_counter() - start
        if model == "mlp-train":
            figures, error = _training(variant)
        else:
            figures, error = _inference(model, variant)
        figures["first_output_s"] += load_s
        if figures.get("all_on_max_s") is not None:
            figures["all_on_max_s"] += load_s
    figures.update(
        max_abs_error=error,
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        peak_total_mib=memory.peak_total / 2**20,
    )
    if loaded is not None:
        figures["bundle_artifacts"] = loaded
        figures["bundle_load_s"] = load_s
    if variant.startswith("max"):
        from torch_max_backend import compile_stats
        from torch_max_backend.runtime.compile_workers import worker_count

        stats = compile_stats()
        figures.update(
            workers=worker_count(),
            graphs=stats.graphs_built,
            max_compiles=stats.max_compiles,
            real_compiles=stats.max_compiles - stats.disk_cache_hits,
            eager_calls=stats.eager_calls,
            warm_starts=stats.warm_starts,
            build_s=stats.build_seconds,
        )
    return figures


def _run(
    model: str, variant: str, cache: Path, timeout: float, bundle: Path | None = None
) -> dict[str, Any]:
    env = dict(os.environ)
    for name in (
        "TORCH_MAX_BACKEND_COMPILE_WORKERS",
        "TORCH_MAX_BACKEND_BACKGROUND_COMPILE",
    ):
        env.pop(name, None)
    env.update(_ENV.get(variant, {}))
    env["MODULAR_DERIVED_PATH"] = str(cache)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
    args = ["-m", "benchmarks.compile_time", "--child", model, variant]
    if bundle is not None:
        args += ["--bundle", str(bundle)]
    try:
        figures = child_json(args, env=env, timeout=timeout)
    except ChildFailed as e:
        raise SystemExit(
            f"{variant} on {model} failed (exit {e.returncode}):\n{e.stderr[-3000:]}"
        ) from e
    figures.update(model=model, variant=variant)
    print(json.dumps(figures), flush=True)
    return figures


def _pack(cache: Path, bundle: Path) -> None:
    env = dict(os.environ, MODULAR_DERIVED_PATH=str(cache))
    subprocess.run(
        [sys.executable, "-m", "torch_max_backend.cli", "cache", "pack", str(bundle)],
        env=env,
        check=True,
        cwd=ROOT,
        capture_output=True,
    )


def measure(model: str, variants: list[str], timeout: float, warm: bool) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="compile-bench-") as tmp:
        caches = Path(tmp)
        for variant in variants:
            cache = caches / variant
            bundle = None
            if variant == "max-bundle":
                bundle = caches / "bundle.tar.gz"
                if not (caches / "max").is_dir():
                    raise SystemExit("max-bundle needs the max variant before it")
                _pack(caches / "max", bundle)
            rows.append(_run(model, variant, cache, timeout, bundle))
            if warm and variant.startswith("max") and variant != "max-bundle":
                row = _run(model, variant, cache, timeout)
                row["variant"] += " (warm)"
                rows.append(row)
            if variant != "max":  # the max row's caches make the bundle
                shutil.rmtree(cache, ignore_errors=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def number(row: dict[str, Any], key: str, digits: int = 1) -> str:
        value = row.get(key)
        return "-" if value is None else f"{value:.{digits}f}"

    lines = [
        [
            row["model"],
            row["variant"],
            number(row, "first_output_s"),
            number(row, "all_on_max_s"),
            row.get("graphs", "-"),
            row.get("real_compiles", "-"),
            row.get("eager_calls", "-"),
            f"{row['peak_rss_mib']:.0f}",
            f"{row['peak_total_mib']:.0f}",
            f"{row['max_abs_error']:.1e}",
        ]
        for row in rows
    ]
    return tabulate(
        lines,
        headers=[
            "model",
            "variant",
            "first output s",
            "all on MAX s",
            "graphs",
            "real MAX compiles",
            "calls in PyTorch",
            "peak RSS MiB",
            "with workers MiB",
            "max |err|",
        ],
        tablefmt="github",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "VARIANT"))
    parser.add_argument("--bundle")
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--variants", "--backends", default=DEFAULT_VARIANTS)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child, args.bundle)))
        return
    variants = args.variants.split(",")
    rows: list[dict[str, Any]] = []
    for model in args.models.split(","):
        rows += measure(model, variants, args.timeout, args.warm)
    text = table(rows)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
