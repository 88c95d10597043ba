"""``torch-max-backend export`` and ``torch-max-backend run``.

``run`` imports no torch: it reads packages with ``aot.runner`` alone.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .aot.manifest import PackageError, TensorSpec
from .env_vars import env_flag


def add_parsers(sub: Any) -> None:
    export = sub.add_parser("export", help="export a model to a MAX package")
    export.add_argument(
        "--model", required=True, help="MODULE:FACTORY returning the model"
    )
    export.add_argument(
        "--example-shape",
        action="append",
        required=True,
        help="one per input: SHAPE[:DTYPE], e.g. 4,16 or 2,32:int64",
    )
    export.add_argument(
        "--dynamic",
        action="append",
        default=[],
        help="INPUT:AXIS kept symbolic, e.g. 0:0",
    )
    export.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    export.add_argument("--output", required=True, type=Path)
    export.add_argument(
        "--verify", action="store_true", help="compare with eager PyTorch"
    )

    run = sub.add_parser("run", help="run a MAX package (no torch needed)")
    run.add_argument("--model", type=Path, help="the package directory")
    run.add_argument("--input", type=Path, help=".npy, .safetensors or .json inputs")
    run.add_argument("--device", default="cpu", help="cpu, gpu or gpu:N")
    run.add_argument("--iters", type=int, default=10)
    run.add_argument("--format", default="pretty", choices=["pretty", "json"])
    run.add_argument("--output", type=Path, help="write the outputs to this .npz")
    run.add_argument("--check", action="store_true", help="health report and smoke run")


def _parse_shape(text: str) -> tuple[list[int], str]:
    shape, _, dtype = text.partition(":")
    try:
        dims = [int(d) for d in shape.split(",") if d.strip()]
    except ValueError:
        raise SystemExit(
            f"error: bad --example-shape {text!r}; use e.g. 4,16:float32"
        ) from None
    return dims, dtype or "float32"


def export_command(args: argparse.Namespace) -> int:
    import torch

    from .aot.exporter import export
    from .aot.runner import load

    module_name, _, factory_name = args.model.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as e:
        print(f"error: cannot find {args.model}: {e}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    made = factory()
    # A factory may return the model alone or with example inputs.
    model = (made[0] if isinstance(made, tuple) else made).eval()
    shapes = [_parse_shape(s) for s in args.example_shape]

    def example(grow: int) -> list[torch.Tensor]:
        tensors = []
        for i, (dims, dtype) in enumerate(shapes):
            sized = [
                d + grow if f"{i}:{a}" in args.dynamic else d
                for a, d in enumerate(dims)
            ]
            torch_dtype = getattr(torch, dtype)
            if torch_dtype.is_floating_point:
                tensors.append(torch.randn(sized, dtype=torch_dtype))
            else:
                tensors.append(torch.randint(0, 8, sized, dtype=torch_dtype))
        return tensors

    dynamic: list[dict[int, Any]] = [{} for _ in shapes]
    for item in args.dynamic:
        i, _, axis = item.partition(":")
        dynamic[int(i)][int(axis)] = torch.export.Dim(f"d{i}_{axis}")
    path = export(
        model,
        example(0),
        args.output,
        dynamic_shapes=tuple(dynamic) if args.dynamic else None,
        device=args.device,
    )
    print(f"exported {args.model} to {path}")
    if not args.verify:
        return 0
    loaded = load(path, args.device)
    rtol = atol = 1e-4
    for grow in (0, 3) if args.dynamic else (0,):
        inputs = example(grow)
        with torch.no_grad():
            expected = model(*inputs)
        expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
        got = loaded(*[t.numpy() for t in inputs])
        for k, (g, e) in enumerate(zip(got, expected, strict=True)):
            try:
                np.testing.assert_allclose(g, e.numpy(), rtol=rtol, atol=atol)
            except AssertionError as failure:
                print(f"verify FAILED on output {k}: {failure}", file=sys.stderr)
                return 1
        shapes_seen = ", ".join(str(list(t.shape)) for t in inputs)
        print(f"verify ok at {shapes_seen} (rtol={rtol}, atol={atol})")
    return 0


def _read_inputs(path: Path, specs: list[TensorSpec]) -> list[np.ndarray]:
    if not path.is_file():
        raise PackageError(f"no input file {path}")
    if path.suffix == ".npy":
        return [np.load(path)]
    if path.suffix == ".safetensors":
        from safetensors.numpy import load_file

        arrays = load_file(str(path))
        return [arrays[s.name] for s in specs]
    if path.suffix == ".json":
        raw = json.loads(path.read_text())
        return [np.asarray(raw[s.name], dtype=s.dtype) for s in specs]
    raise PackageError(f"{path}: inputs must be .npy, .safetensors or .json")


def _random_inputs(specs: list[TensorSpec]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = []
    for spec in specs:
        shape = [d if isinstance(d, int) else 2 for d in spec.shape]
        if spec.dtype.startswith("float"):
            arrays.append(rng.standard_normal(shape).astype(spec.dtype))
        else:
            arrays.append(rng.integers(0, 8, shape).astype(spec.dtype))
    return arrays


def run_command(args: argparse.Namespace) -> int:
    from .aot.runner import load

    if args.model is None:
        print("error: --model PKG is required", file=sys.stderr)
        return 2
    try:
        debug = bool(env_flag("TORCH_MAX_BACKEND_DEBUG"))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    def say(message: str) -> None:
        if debug:
            print(f"torch-max-backend: {message}", file=sys.stderr)

    report: dict[str, Any] = {}
    try:
        if args.check:
            from max.driver import accelerator_count

            from .storage.cache_dir import max_version

            report["max_version"] = max_version()
            report["accelerators"] = accelerator_count()
        start = time.perf_counter()
        model = load(args.model, args.device)
        say(f"loaded {args.model} in {(time.perf_counter() - start) * 1e3:.1f} ms")
        specs = model.manifest.inputs
        inputs = (
            _read_inputs(args.input, specs) if args.input else _random_inputs(specs)
        )
        for spec, array in zip(specs, inputs, strict=False):
            say(
                f"input {spec.name}: {array.dtype}{list(array.shape)} "
                f"mean {float(array.mean()):.4g} std {float(array.std()):.4g}"
            )
        results = []
        for i in range(max(args.iters, 1)):
            results.append(model.run(*inputs))
            say(f"run {i}: {results[-1].latency_ms:.3f} ms")
    except PackageError as e:
        if args.check:
            report["ok"] = False
            report["error"] = str(e)
            print(json.dumps(report, indent=2))
        else:
            print(f"error: {e}", file=sys.stderr)
        return 2
    latencies = sorted(r.latency_ms for r in results)
    last = results[-1]
    for k, out in enumerate(last.outputs):
        say(f"output {k}: {out.dtype}{list(out.shape)} mean {float(out.mean()):.4g}")
    report.update(
        ok=True,
        outputs=[
            {
                "shape": list(o.shape),
                "dtype": str(o.dtype),
                "mean": float(o.mean()),
                "std": float(o.std()),
                "min": float(o.min()),
                "max": float(o.max()),
            }
            for o in last.outputs
        ],
        latency_ms={
            "median": statistics.median(latencies),
            "p90": latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))],
            "iters": len(latencies),
        },
        memory_bytes=last.memory_bytes,
        peak_rss_bytes=last.peak_rss_bytes,
    )
    if args.output:
        np.savez(args.output, *last.outputs)
    if args.format == "json" or args.check:
        print(json.dumps(report, indent=2))
    else:
        for k, o in enumerate(report["outputs"]):
            print(
                f"output {k}: {o['dtype']}{o['shape']} mean {o['mean']:.6g} "
                f"std {o['std']:.6g} min {o['min']:.6g} max {o['max']:.6g}"
            )
        lat = report["latency_ms"]
        print(
            f"latency: median {lat['median']:.3f} ms, p90 {lat['p90']:.3f} ms "
            f"over {lat['iters']} run(s)"
        )
        print(
            f"memory: {report['memory_bytes']} bytes held, peak RSS "
            f"{report['peak_rss_bytes'] / 2**20:.1f} MiB"
        )
    return 0
