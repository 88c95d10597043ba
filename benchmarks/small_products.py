"""Small matrix products on the CPU: MAX's matmul against the summed form our
lowering builds below ``SUMMED_PRODUCT_LIMIT`` (lower/products.py), and PyTorch.

    python -m benchmarks.small_products [--runs 300] [--json FILE]

For each shape (batch, M, K, N), one MAX graph holding one matmul and one
holding the product as our lowering sums it are compiled over an empty cache
(wall seconds of the compile) and timed (median microseconds of a call, the
graph's call overhead included); PyTorch's ``torch.matmul`` is timed in a
process of its own, before MAX's runtime threads run. The shapes are those
of small models' Linears, LM heads and their gradients, attention over a few
heads, and two past the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmarks.child import child_json_or_exit
from benchmarks.gemm import median_ms
from torch_max_backend.lower.products import SUMMED_PRODUCT_LIMIT

# (batch, M, K, N); batch 0 is a 2-d product.
SHAPES = [
    (0, 32, 64, 64),
    (0, 32, 64, 1000),
    (0, 1000, 32, 64),
    (8, 16, 16, 16),
    (0, 32, 256, 256),
    (0, 128, 256, 256),
    (0, 64, 512, 512),
]


def _operand_shapes(shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    batch, m, k, n = shape
    lead = [batch] if batch else []
    return [*lead, m, k], [*lead, k, n]


def _median_us(call: Any, runs: int) -> float:
    return median_ms(call, runs) * 1e3


def _torch_child(runs: int) -> dict[str, float]:
    import torch

    figures = {}
    for shape in SHAPES:
        a, b = (torch.randn(s) for s in _operand_shapes(shape))
        figures[str(shape)] = _median_us(partial(torch.matmul, a, b), runs)
    return figures


def _max_child(runs: int) -> dict[str, Any]:
    import torch
    from max.driver import CPU, Buffer
    from max.dtype import DType
    from max.engine import InferenceSession
    from max.graph import DeviceRef, Graph, TensorType, ops

    from torch_max_backend.lower.products import summed
    from torch_max_backend.runtime import max_poller

    session = InferenceSession(devices=[CPU()])
    device = DeviceRef.CPU()
    figures: dict[str, Any] = {}
    for shape in SHAPES:
        a_shape, b_shape = _operand_shapes(shape)
        a, b = torch.randn(a_shape), torch.randn(b_shape)
        expected = a @ b
        buffers = [Buffer.from_dlpack(a), Buffer.from_dlpack(b)]
        row = {}
        for form, build in (("matmul", ops.matmul), ("summed", summed)):
            types = [TensorType(DType.float32, s, device) for s in (a_shape, b_shape)]
            name = f"{form}_{'x'.join(map(str, shape))}"
            with Graph(name, input_types=types) as graph:
                graph.output(build(graph.inputs[0].tensor, graph.inputs[1].tensor))
            start = time.perf_counter()
            model = session.load(graph)
            compile_s = time.perf_counter() - start
            (out,) = model.execute(*buffers)
            torch.testing.assert_close(
                torch.from_dlpack(out), expected, rtol=1e-4, atol=1e-4
            )
            # As the backend runs MAX: its polling thread idled once started.
            max_poller.idle_for_timing()
            row[form] = {
                "compile_s": compile_s,
                "run_us": _median_us(partial(model.execute, *buffers), runs),
            }
        figures[str(shape)] = row
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=["torch", "max"])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.child:
        child = _torch_child if args.child == "torch" else _max_child
        print(json.dumps(child(args.runs)))
        return
    module = ["-m", "benchmarks.small_products", "--runs", str(args.runs)]
    eager = child_json_or_exit([*module, "--child", "torch"], "PyTorch's products")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, MODULAR_DERIVED_PATH=cache)
        timed = child_json_or_exit(
            [*module, "--child", "max"], "MAX's products", env=env
        )
    rows = []
    for shape in SHAPES:
        batch, m, k, n = shape
        macs = max(batch, 1) * m * k * n
        mm, sums = timed[str(shape)]["matmul"], timed[str(shape)]["summed"]
        rows.append({
            "shape": f"{batch}x{m}x{k}x{n}" if batch else f"{m}x{k}x{n}",
            "multiply_adds": macs,
            "within_limit": macs <= SUMMED_PRODUCT_LIMIT,
            "torch_us": eager[str(shape)],
            "matmul_us": mm["run_us"],
            "summed_us": sums["run_us"],
            "matmul_compile_s": mm["compile_s"],
            "summed_compile_s": sums["compile_s"],
        })  # fmt: skip
    print(tabulate(
        [[r["shape"], r["multiply_adds"], "yes" if r["within_limit"] else "no",
          f"{r['torch_us']:.1f}", f"{r['matmul_us']:.1f}", f"{r['summed_us']:.1f}",
          f"{r['matmul_compile_s']:.1f}", f"{r['summed_compile_s']:.1f}"] for r in rows],
        headers=["shape", "multiply-adds", "summed by us", "torch us", "MAX matmul us",
                 "summed us", "matmul compile s", "summed compile s"],
        tablefmt="github",
    ))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
