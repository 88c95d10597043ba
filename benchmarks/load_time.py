"""Load time of an exported model: our MAX package beside AOTInductor's .pt2.

    python -m benchmarks.load_time [--models mlp,gpt2-2layer] [--runs 3]

Each model is exported once both ways; then each package is loaded in fresh
processes (``--runs`` of them, median reported): the time to import the
runtime (ours imports no torch), the time to load the package (read and
initialize), and the first inference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from tabulate import tabulate

from benchmarks.child import child_json

_OURS = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from torch_max_backend.aot.runner import load
t1 = time.perf_counter()
model = load(sys.argv[1])
t2 = time.perf_counter()
inputs = [np.load(p) for p in sys.argv[2:]]
model(*inputs)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_run_s": t3 - t2,
                  "torch_imported": "torch" in sys.modules}))
"""

_AOTI = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import torch
t1 = time.perf_counter()
model = torch._inductor.aoti_load_package(sys.argv[1])
t2 = time.perf_counter()
inputs = [torch.from_numpy(np.load(p)) for p in sys.argv[2:]]
with torch.no_grad():
    model(*inputs)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_run_s": t3 - t2,
                  "torch_imported": True}))
"""


def _export_both(name: str, directory: Path) -> tuple[Path, Path, list[Path]]:
    import numpy as np
    import torch

    from benchmarks.zoo import build
    from torch_max_backend import export

    model, inputs = build(name)
    ours = export(model, inputs, directory / f"{name}.maxpkg")
    with torch.no_grad():
        program = torch.export.export(model, inputs)
    aoti = Path(
        torch._inductor.aoti_compile_and_package(
            program, package_path=str(directory / f"{name}.pt2")
        )
    )
    files = []
    for i, tensor in enumerate(inputs):
        files.append(directory / f"{name}_input{i}.npy")
        np.save(files[-1], tensor.numpy())
    return ours, aoti, files


def _time(script: str, package: Path, inputs: list[Path], runs: int) -> dict:
    samples = []
    for _ in range(runs):
        samples.append(child_json(["-c", script, str(package), *map(str, inputs)]))
    return {
        key: statistics.median(s[key] for s in samples)
        if key != "torch_imported"
        else samples[0][key]
        for key in samples[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,gpt2-2layer")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="load-bench-") as tmp:
        for name in args.models.split(","):
            ours, aoti, inputs = _export_both(name, Path(tmp))
            for label, script, package in (
                ("max package", _OURS, ours),
                ("AOTInductor .pt2", _AOTI, aoti),
            ):
                t = _time(script, package, inputs, args.runs)
                print(json.dumps({"model": name, "format": label, **t}), flush=True)
                rows.append(
                    [
                        name,
                        label,
                        f"{t['import_s']:.2f}",
                        f"{t['load_s'] * 1e3:.1f}",
                        f"{t['first_run_s'] * 1e3:.1f}",
                        "yes" if t["torch_imported"] else "no",
                    ]
                )
    print(
        tabulate(
            rows,
            headers=[
                "model",
                "format",
                "import s",
                "load ms",
                "first run ms",
                "imports torch",
            ],
            tablefmt="github",
        )
    )


if __name__ == "__main__":
    main()
