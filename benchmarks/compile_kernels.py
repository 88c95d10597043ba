"""What one more kernel costs MAX's compiler: small graphs over empty caches.

    python -m benchmarks.compile_kernels [--cases a,b] [--jobs 2] [--json FILE]

Each case builds one MAX graph with MAX's own API (no torch) and compiles it
in a fresh process over an empty cache directory; the row gives the compile's
wall seconds and the CPU seconds of the process during it (the figure to
compare: it does not depend on what else the machine runs), and the number of
kernels MAX compiled with the distinct matmul kernels among them (read from
the object file MAX caches).

The cases pair a graph with a variant that differs in one thing: products of
one shape or of several shapes, the same shapes with symbolic sizes (which
MAX's matmul kernel is then compiled for once), and three ways of writing a
slice of one tensor into another (a gather, as a position-wise select; a
concatenation; a padding).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmarks.child import child_json_or_exit
from torch_max_backend.lower.products import summed

PRODUCTS = 6
SLICES = 6


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _products(
    n_shapes: int, symbolic: bool, by_sum: bool = False
) -> tuple[list, Callable]:
    """``PRODUCTS`` products [16, K] x [K, N]: ``n_shapes`` distinct (K, N)."""
    from max.graph import ops

    def shape(i: int) -> tuple[int, int]:
        j = i % n_shapes
        return 8 + 8 * j, 24 + j

    types = [_f32(16, shape(i)[0]) for i in range(PRODUCTS)]
    types += [_f32(*shape(i)) for i in range(PRODUCTS)]

    def outputs(xs: list) -> list:
        results = []
        for i in range(PRODUCTS):
            a, b = xs[i], xs[PRODUCTS + i]
            if symbolic:
                n = shape(i)[1]
                a = ops.rebind(a, [f"m{i}", f"k{i}"])
                b = ops.rebind(b, [f"k{i}", f"n{i}"])
                results.append(ops.rebind(ops.matmul(a, b), [16, n]))
            else:
                results.append(summed(a, b) if by_sum else ops.matmul(a, b))
        return results

    return types, outputs


def _linears(symbolic: bool) -> tuple[list, Callable]:
    """``PRODUCTS`` Linears of distinct shapes: x [16, K] times a weight
    stored [N, K], read transposed, plus a bias, then relu: MAX fuses the
    transpose and the epilogue into its matmul kernel."""
    from max.graph import ops

    shapes = [(8 + 8 * i, 24 + i) for i in range(PRODUCTS)]
    types = [_f32(16, k) for k, _ in shapes] + [_f32(n, k) for k, n in shapes]
    types += [_f32(n) for _, n in shapes]

    def outputs(xs: list) -> list:
        results = []
        for i, (_, n) in enumerate(shapes):
            x, weight = xs[i], ops.transpose(xs[PRODUCTS + i], 0, 1)
            if symbolic:
                x = ops.rebind(x, [f"m{i}", f"k{i}"])
                weight = ops.rebind(weight, [f"k{i}", f"n{i}"])
            product = ops.matmul(x, weight)
            if symbolic:
                product = ops.rebind(product, [16, n])
            results.append(ops.relu(product + xs[2 * PRODUCTS + i]))
        return results

    return types, outputs


def _slice_writes(how: str) -> tuple[list, Callable]:
    """``SLICES`` writes of a [2, c, 6] tensor into [2, L, 6] at position 2."""
    from max.dtype import DType
    from max.graph import DeviceRef, TensorType, ops

    cpu = DeviceRef.CPU()
    lengths = [(8 + 2 * i, 4 + i) for i in range(SLICES)]
    types = [_f32(2, size, 6) for size, _ in lengths]
    types += [_f32(2, count, 6) for _, count in lengths]
    types.append(TensorType(DType.int64, [], device=cpu))  # a run-time zero
    first = 2

    def integer(value: int) -> Any:
        return ops.constant(value, DType.int64, device=cpu)

    def outputs(xs: list) -> list:
        zero, results = xs[-1], []
        for i, (size, count) in enumerate(lengths):
            x, src = xs[i], xs[SLICES + i]
            if how == "concat":
                after = x[:, first + count :]
                results.append(ops.concat([x[:, :first], src, after], axis=1))
                continue
            pos = ops.range(
                zero,
                zero + integer(size),
                integer(1),
                size,
                device=cpu,
                dtype=DType.int64,
            )
            inside = ops.logical_and(
                pos >= integer(first), integer(first + count) > pos
            )
            if how == "gather":
                offset = ops.max(pos - integer(first), integer(0))
                moved = ops.gather(src, ops.min(offset, integer(count - 1)), axis=1)
            else:
                moved = ops.pad(src, [0, 0, first, size - first - count, 0, 0])
            results.append(ops.where(ops.reshape(inside, [1, size, 1]), moved, x))
        return results

    return types, outputs


def _f32(*shape: int) -> Any:
    from max.dtype import DType
    from max.graph import DeviceRef, TensorType

    return TensorType(DType.float32, list(shape), device=DeviceRef.CPU())


def _elementwise(n_shapes: int) -> tuple[list, Callable]:
    from max.graph import ops

    types = [_f32(3 + i, 5) for i in range(n_shapes)]
    return types, lambda xs: [ops.tanh(x) * 2.0 + 1.0 for x in xs]


def _one_product() -> tuple[list, Callable]:
    from max.graph import ops

    return [_f32(16, 8), _f32(8, 24)], lambda xs: [ops.matmul(xs[0], xs[1])]


# name: (what the graph holds, how to build it)
CASES: dict[str, tuple[str, Callable[[], tuple[list, Callable]]]] = {
    "chain": ("an elementwise chain", lambda: _elementwise(1)),
    "chains": ("6 elementwise chains, 6 shapes", lambda: _elementwise(6)),
    "product": ("1 product", _one_product),
    "products-one-shape": (
        f"{PRODUCTS} products of one shape",
        lambda: _products(1, False),
    ),
    "products-shapes": (
        f"{PRODUCTS} products of {PRODUCTS} shapes",
        lambda: _products(PRODUCTS, False),
    ),
    "products-symbolic": (
        f"{PRODUCTS} products of {PRODUCTS} shapes, symbolic sizes",
        lambda: _products(PRODUCTS, True),
    ),
    "products-by-sum": (
        f"{PRODUCTS} products of {PRODUCTS} shapes, each a broadcast product summed",
        lambda: _products(PRODUCTS, False, by_sum=True),
    ),
    "linears": (
        f"{PRODUCTS} Linears (transposed weight, bias, relu) of {PRODUCTS} shapes",
        lambda: _linears(False),
    ),
    "linears-symbolic": (
        f"the same {PRODUCTS} Linears, symbolic sizes",
        lambda: _linears(True),
    ),
    "slices-gather": (
        f"{SLICES} slice writes by gather and select",
        lambda: _slice_writes("gather"),
    ),
    "slices-concat": (
        f"{SLICES} slice writes by concatenation",
        lambda: _slice_writes("concat"),
    ),
    "slices-pad": (
        f"{SLICES} slice writes by padding and select",
        lambda: _slice_writes("pad"),
    ),
}


def _child(case: str) -> dict[str, Any]:
    from max.driver import CPU
    from max.engine import InferenceSession
    from max.graph import Graph

    types, outputs = CASES[case][1]()
    with Graph("case", input_types=types) as graph:
        graph.output(*outputs([value.tensor for value in graph.inputs]))
    session = InferenceSession(devices=[CPU()])
    cpu, wall = _cpu(), time.perf_counter()
    session.load(graph)
    return {"wall_s": time.perf_counter() - wall, "cpu_s": _cpu() - cpu}


def _kernels(cache: Path) -> tuple[int, int]:
    """Kernels and distinct matmul kernels in the object files MAX cached."""
    kernels = products = 0
    for path in (cache / ".mojo_cache").rglob("*"):
        if not path.is_file():
            continue
        with path.open("rb") as file:  # the MLIR entries run to tens of MB
            if file.read(4) != b"\x7fELF":
                continue
        symbols = subprocess.run(
            ["nm", "--defined-only", str(path)], capture_output=True, text=True
        ).stdout
        kernels += len(re.findall(r" __kernel_\w+$", symbols, re.MULTILINE))
        products += symbols.count("TiledMatmul::_outer_m_loop")
    return kernels, products


def _measure(case: str, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="compile-kernels-") as tmp:
        env = dict(os.environ, MODULAR_DERIVED_PATH=tmp)
        figures = child_json_or_exit(
            ["-m", "benchmarks.compile_kernels", "--child", case],
            case,
            env=env,
            timeout=timeout,
        )
        kernels, products = _kernels(Path(tmp) / "cache")
    return {"case": case, **figures, "kernels": kernels, "matmul_kernels": products}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child")
    parser.add_argument("--cases", help="comma-separated (default: all)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    cases = args.cases.split(",") if args.cases else list(CASES)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(lambda c: _measure(c, args.timeout), cases))
    print(
        tabulate(
            [
                [
                    r["case"],
                    CASES[r["case"]][0],
                    f"{r['wall_s']:.1f}",
                    f"{r['cpu_s']:.1f}",
                    r["kernels"],
                    r["matmul_kernels"],
                ]
                for r in rows
            ],
            headers=[
                "case",
                "graph",
                "compile s",
                "CPU s",
                "kernels",
                "matmul kernels",
            ],
            tablefmt="github",
        )
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
