"""Where a trivial graph's cold compile goes: MAX alone against our backend.

    python -m benchmarks.compile_anatomy [--json FILE]

Each row is a fresh process over an empty cache directory (or, for "kernels
cached", one where only MAX's compiled-graph cache was removed):

- max x+1: MAX's own API compiling a graph computing ``x + 1`` (no torch).
- max x+1 then x*2: two graphs one after the other in one process.
- max module [x+1, x*2]: the same two graphs as one ``graph.Module``,
  compiled and loaded together (``load_all``).
- max x+1, kernels cached: MAX's kernel caches kept from an earlier run.
- backend x+1: ``torch.compile(lambda x: x + 1, backend="max")``.
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

from benchmarks.child import child_json, child_json_or_exit

CASES = ["max x+1", "max x+1 then x*2", "max module [x+1, x*2]", "backend x+1"]


def _graph(name: str, scale: bool, module: Any = None) -> Any:
    from max.dtype import DType
    from max.graph import DeviceRef, Graph, TensorType

    kind = TensorType(DType.float32, [4, 8], device=DeviceRef.CPU())
    with Graph(name, input_types=[kind], module=module) as graph:
        (x,) = graph.inputs
        graph.output(x.tensor * 2.0 if scale else x.tensor + 1.0)
    return graph


def _child(case: str) -> dict[str, Any]:
    start = time.perf_counter()
    if case == "backend x+1":
        import torch

        imported = time.perf_counter()
        fn = torch.compile(lambda x: x + 1, backend="max")
        fn(torch.randn(4, 8))
        return {
            "import_s": imported - start,
            "seconds": [time.perf_counter() - imported],
        }
    from max.driver import CPU
    from max.engine import InferenceSession
    from max.graph import Module

    session = InferenceSession(devices=[CPU()])
    imported = time.perf_counter()
    seconds = []
    if case.startswith("max module"):
        module = Module()
        _graph("add", False, module)
        _graph("scale", True, module)
        session.load_all(module)
        seconds.append(time.perf_counter() - imported)
    else:
        graphs = [_graph("add", False)]
        if "then" in case:
            graphs.append(_graph("scale", True))
        for graph in graphs:
            begin = time.perf_counter()
            session.load(graph)
            seconds.append(time.perf_counter() - begin)
    return {"import_s": imported - start, "seconds": seconds}


def measure(timeout: float) -> list[dict[str, Any]]:
    rows = []
    for case in [*CASES, "max x+1, kernels cached"]:
        with tempfile.TemporaryDirectory(prefix="anatomy-") as tmp:
            env = dict(os.environ, MODULAR_DERIVED_PATH=tmp)
            run = case
            if case.endswith("kernels cached"):
                run = "max x+1"
                child_json(
                    ["-m", "benchmarks.compile_anatomy", "--child", "max x+1"],
                    env=env,
                    timeout=timeout,
                )
                shutil.rmtree(Path(tmp) / "cache" / ".max_cache", ignore_errors=True)
            figures = child_json_or_exit(
                ["-m", "benchmarks.compile_anatomy", "--child", run],
                case,
                env=env,
                timeout=timeout,
            )
            figures["case"] = case
            print(json.dumps(figures), flush=True)
            rows.append(figures)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    rows = measure(args.timeout)
    print(
        tabulate(
            [
                [
                    r["case"],
                    f"{r['import_s']:.1f}",
                    " + ".join(f"{s:.1f}" for s in r["seconds"]),
                ]
                for r in rows
            ],
            headers=["case", "import s", "compile s (each graph)"],
            tablefmt="github",
        )
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
