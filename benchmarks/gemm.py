"""MAX's and PyTorch's fp32 matmuls on the CPU, each measured in a process of its own.

    python -m benchmarks.gemm [--runs 100] [--rows M]

One fresh process times ``torch.nn.functional.linear`` and ``x @ w`` for the
benchmark models' GEMM shapes; another times MAX graphs holding one matmul
with the weight as PyTorch stores it: [N, K] read transposed (a Linear) and
[K, N] read as it is (GPT-2's Conv1D). Separate processes matter: once MAX's
CPU runtime has run, its worker threads busy-wait for more work (200 us by
default) and slow PyTorch's own threads down; measured in one process,
PyTorch's GEMMs look up to a third slower than they are. MAX runs as the
backend runs it: its polling thread idled once started. A third process
alternates a MAX matmul and a PyTorch one, the pattern of a model whose
MAX graphs are interleaved with PyTorch work, and reports what that costs.
``--rows 1`` gives every shape one row, a decode step's matrix-vector
products, and reports the bandwidth each reaches reading its weight; with at
most 8 rows the product is also timed with the skinny Mojo kernel our
lowering uses for such products (kernels/mojo/skinny_matmul.mojo). Where a
vendor BLAS is found (MKL, kernels/vendor_blas.py) each shape is also timed
through our vendor kernel inside a MAX graph, the ``vendor`` product strategy.

``--forms`` times each shape's forms as ``product_strategy="auto"`` does;
with ``--streamed``, as it does in a graph whose weights outgrow the
last-level cache: each call reads the next of several copies of the weight,
from memory (kernels/product_timing.py).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from tabulate import tabulate

from benchmarks.child import ChildFailed, child_json
from benchmarks.gemm_forms import FORMS_HEADERS, forms_child, forms_rows
from torch_max_backend.lower.product_kernels import SKINNY_MAX_ROWS

# (M, K, N): MLP hidden layers; GPT-2's attention input, MLP up and down
# projections at 128 tokens; its tied LM head.
SHAPES = [
    (64, 1024, 1024),
    (128, 768, 2304),
    (128, 768, 3072),
    (128, 3072, 768),
    (128, 768, 50257),
]


def _shapes(rows: int) -> list[tuple[int, int, int]]:
    """SHAPES with M replaced by ``rows`` (0 keeps them as they are)."""
    return [(rows or m, k, n) for m, k, n in SHAPES]


def median_ms(call: Callable[[], object], runs: int) -> float:
    for _ in range(5):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def max_median_ms(call: Callable[[], object], runs: int) -> float:
    """``median_ms`` of a MAX execute, MAX's runtime as the backend runs it:
    the first execute starts MAX's polling thread, which the backend idles
    (runtime/max_poller.py); timed under it, products ran 11-33 % slower."""
    from torch_max_backend.runtime import max_poller

    call()
    max_poller.idle_for_timing()
    return median_ms(call, runs)


def _torch_child(runs: int, rows: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    figures = {}
    for m, k, n in _shapes(rows):
        x, w_nk, w_kn = torch.randn(m, k), torch.randn(n, k), torch.randn(k, n)
        figures[f"{m}x{k}x{n}"] = {
            "torch_linear": median_ms(partial(F.linear, x, w_nk), runs),
            "torch_kn": median_ms(partial(torch.matmul, x, w_kn), runs),
        }
    return figures


def _max_model(
    m: int,
    k: int,
    n: int,
    transposed: bool,
    name: str,
    constant: Any = None,
    row_sums: bool = False,
    skinny: bool = False,
    vendor: bool = False,
) -> Any:
    """A one-matmul MAX model; the weight is its second input, or ``constant``
    (a numpy array) embedded in the graph, which MAX may repack when compiling.
    ``row_sums``: one row against a [N, K] weight as a product and a sum along
    each stored row, as our lowering builds a decode step's Linear.
    ``skinny``: the product by torch-max-backend's skinny kernel.
    ``vendor``: by MKL's sgemm through our vendor kernel (kernels/vendor_blas.py)."""
    from max.driver import CPU
    from max.dtype import DType
    from max.engine import InferenceSession
    from max.graph import DeviceRef, Graph, TensorType, ops

    device = DeviceRef.CPU()
    weight = [n, k] if transposed else [k, n]
    types = [TensorType(DType.float32, [m, k], device)]
    if constant is None:
        types.append(TensorType(DType.float32, weight, device))
    with Graph(name, input_types=types) as graph:
        x = graph.inputs[0].tensor
        if constant is None:
            w = graph.inputs[1].tensor
        else:
            w = ops.constant(constant, DType.float32, device)
        if row_sums:
            graph.output(ops.reshape(ops.sum(ops.mul(w, x), -1), [1, n]))
        elif skinny:
            from torch_max_backend.kernels.library import SHIPPED, custom

            out_type = TensorType(DType.float32, [m, n], device)
            parameters = {"rows": m, "weight_nk": transposed}
            kernel = "torch_max_backend_skinny_matmul"
            graph.output(
                *custom(SHIPPED, kernel, [x, w], [out_type], device, parameters)
            )
        elif vendor:
            from torch_max_backend.kernels.library import custom
            from torch_max_backend.kernels.vendor_blas import (
                VENDOR_KERNELS,
                vendor_blas,
            )

            found = vendor_blas()
            assert found is not None, "no vendor BLAS here (pip install mkl)"
            out_type = TensorType(DType.float32, [m, n], device)
            parameters = {"weight_nk": transposed, "library": found.path}
            kernel = "torch_max_backend_vendor_matmul"
            graph.output(
                *custom(VENDOR_KERNELS, kernel, [x, w], [out_type], device, parameters)
            )
        else:
            graph.output(ops.matmul(x, ops.transpose(w, 0, 1) if transposed else w))
    return InferenceSession(devices=[CPU()]).load(graph)


def _max_child(runs: int, rows: int) -> dict[str, Any]:
    import torch
    from max.driver import Buffer

    from torch_max_backend.kernels.vendor_blas import vendor_blas

    kinds = [(True, "max_nk", {}), (False, "max_kn", {})]
    if vendor_blas() is not None:
        kinds += [(True, "vendor_nk", {"vendor": True})]
        kinds += [(False, "vendor_kn", {"vendor": True})]
    figures = {}
    for m, k, n in _shapes(rows):
        row = {}
        for transposed, key, how in kinds:
            name = f"gemm_{key}_{m}_{k}_{n}"
            model = _max_model(m, k, n, transposed, name, **how)
            weight = (n, k) if transposed else (k, n)
            buffers = [
                Buffer.from_dlpack(torch.randn(m, k)),
                Buffer.from_dlpack(torch.randn(*weight)),
            ]
            row[key] = max_median_ms(partial(model.execute, *buffers), runs)
        if m == 1:
            model = _max_model(m, k, n, True, f"gemv_rows_{k}_{n}", row_sums=True)
            buffers = [
                Buffer.from_dlpack(torch.randn(m, k)),
                Buffer.from_dlpack(torch.randn(n, k)),
            ]
            row["max_row_sums"] = max_median_ms(partial(model.execute, *buffers), runs)
        if m <= SKINNY_MAX_ROWS:
            for transposed, key in ((True, "skinny_nk"), (False, "skinny_kn")):
                name = f"gemm_{key}_{m}_{k}_{n}"
                model = _max_model(m, k, n, transposed, name, skinny=True)
                weight = (n, k) if transposed else (k, n)
                buffers = [
                    Buffer.from_dlpack(torch.randn(m, k)),
                    Buffer.from_dlpack(torch.randn(*weight)),
                ]
                row[key] = max_median_ms(partial(model.execute, *buffers), runs)
        figures[f"{m}x{k}x{n}"] = row
    return figures


def _constant_child(runs: int, rows: int) -> dict[str, Any]:
    import numpy as np
    import torch
    from max.driver import Buffer

    figures = {}
    for m, k, n in _shapes(rows)[:2]:
        weight = np.random.default_rng(0).standard_normal((n, k), dtype=np.float32)
        model = _max_model(m, k, n, True, f"gemm_const_{m}_{k}_{n}", weight)
        x = Buffer.from_dlpack(torch.randn(m, k))
        figures[f"{m}x{k}x{n}"] = max_median_ms(partial(model.execute, x), runs)
    return figures


def _alternating_child(runs: int, rows: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from max.driver import Buffer

    m, k, n = _shapes(rows)[0]
    model = _max_model(m, k, n, True, f"gemm_max_nk_{m}_{k}_{n}")
    x, w = torch.randn(m, k), torch.randn(n, k)
    buffers = [Buffer.from_dlpack(x), Buffer.from_dlpack(w)]

    def both() -> None:
        model.execute(*buffers)
        F.linear(x, w)

    return {
        "shape": f"{m}x{k}x{n}",
        "max_alone": max_median_ms(lambda: model.execute(*buffers), runs),
        "torch_after_max": median_ms(lambda: F.linear(x, w), runs),
        "alternating": median_ms(both, runs),
    }


CHILDREN = {
    "forms": lambda runs, rows: forms_child(_shapes(rows)),
    "torch": _torch_child,
    "max": _max_child,
    "constant": _constant_child,
    "alternating": _alternating_child,
}


def _spawn(which: str, runs: int, rows: int, *more: str) -> dict[str, Any]:
    try:
        return child_json(
            [
                "-m",
                "benchmarks.gemm",
                "--child",
                which,
                "--runs",
                str(runs),
                "--rows",
                str(rows),
                *more,
            ]
        )
    except ChildFailed as e:
        raise SystemExit(f"the {which} process failed:\n{e.stderr[-3000:]}") from e


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument(
        "--constant",
        action="store_true",
        help="also time MAX with the weight a graph constant (first two shapes; "
        "a cold compile takes about a minute per shape)",
    )
    parser.add_argument(
        "--rows",
        type=int,
        default=0,
        help="M of every shape (1: a decode step's matrix-vector products)",
    )
    parser.add_argument(
        "--forms",
        action="store_true",
        help="only time each shape's product forms as product_strategy='auto' "
        "does (symbolic-size graphs, interleaved rounds, medians in us)",
    )
    parser.add_argument(
        "--streamed",
        action="store_true",
        help="with --forms: each call reads a copy of the weight that is not "
        "in the cache, as in a graph whose weights outgrow the last-level cache",
    )
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "forms":
        figures = forms_child(_shapes(args.rows), args.streamed)
        print(json.dumps(figures), flush=True)
        return
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.runs, args.rows)), flush=True)
        return
    if args.forms:
        streamed = ["--streamed"] if args.streamed else []
        timed = _spawn("forms", args.runs, args.rows, *streamed)
        print(tabulate(forms_rows(timed), headers=FORMS_HEADERS))
        return
    torch_figures = _spawn("torch", args.runs, args.rows)
    max_figures = _spawn("max", args.runs, args.rows)
    rows = []
    for shape, t in torch_figures.items():
        mx = max_figures[shape]
        m, k, n = (int(s) for s in shape.split("x"))
        gflop = 2 * m * k * n / 1e9
        rows.append(
            [
                shape,
                f"{t['torch_linear']:.3f}",
                f"{mx['max_nk']:.3f}",
                f"{t['torch_kn']:.3f}",
                f"{mx['max_kn']:.3f}",
                f"{gflop / t['torch_linear'] * 1e3:.0f} / {gflop / mx['max_nk'] * 1e3:.0f}",
                # fp32 weight read once: what bounds a matrix-vector product
                f"{4 * k * n / t['torch_linear'] / 1e6:.0f} / "
                f"{4 * k * n / mx['max_nk'] / 1e6:.0f} / "
                f"{4 * k * n / mx['max_kn'] / 1e6:.0f}",
            ]
        )
        if "max_row_sums" in mx:
            ms = mx["max_row_sums"]
            rows[-1].append(f"{ms:.3f} ({4 * k * n / ms / 1e6:.0f} GB/s)")
        for kind in ("skinny", "vendor"):
            if f"{kind}_nk" in mx:
                nk, kn = mx[f"{kind}_nk"], mx[f"{kind}_kn"]
                rows[-1].append(
                    f"{nk:.3f} / {kn:.3f} "
                    f"({4 * k * n / nk / 1e6:.0f} / {4 * k * n / kn / 1e6:.0f} GB/s)"
                )
    print(
        tabulate(
            rows,
            headers=[
                "M x K x N",
                "torch linear ms",
                "MAX [N,K] ms",
                "torch x@W[K,N] ms",
                "MAX [K,N] ms",
                "GFLOP/s torch / MAX",
                "weight GB/s torch / MAX [N,K] / [K,N]",
                *(["MAX [N,K] as row sums ms"] if args.rows == 1 else []),
                *(
                    ["skinny kernel [N,K] / [K,N] ms"]
                    if 0 < args.rows <= SKINNY_MAX_ROWS
                    else []
                ),
                *(
                    ["vendor (MKL) [N,K] / [K,N] ms"]
                    if "vendor_nk" in next(iter(max_figures.values()))
                    else []
                ),
            ],
        )
    )
    if args.constant:
        constant = _spawn("constant", args.runs, args.rows)
        print()
        for shape, ms in constant.items():
            print(
                f"{shape}: MAX with a constant [N,K] weight {ms:.3f} ms "
                f"(as an input {max_figures[shape]['max_nk']:.3f}, "
                f"torch {torch_figures[shape]['torch_linear']:.3f})"
            )
    alt = _spawn("alternating", args.runs, args.rows)
    print(
        f"\n{alt['shape']}, one process: MAX alone {alt['max_alone']:.3f} ms, "
        f"torch after MAX has run {alt['torch_after_max']:.3f} ms, the two "
        f"alternating {alt['alternating']:.3f} ms per pair"
    )


if __name__ == "__main__":
    main()
