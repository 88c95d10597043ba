"""Timing the ways a float32 (or half-precision) product ``x[M, K] @ W`` can
run on the CPU.

Each way (a *form*) is one small MAX graph with symbolic sizes, compiled
once per machine (the forms a timing lacks together, each kept as an
artifact that later processes load in milliseconds: timing_graphs.py) and
run here at the sizes asked, so timing a new shape costs milliseconds, not
a compile. The forms, by the names of the product strategies that build
them (lower/product_kernels.py):

- ``matmul``: MAX's matmul kernel;
- ``skinny``: our few-rows kernel (kernels/mojo/skinny_matmul.mojo);
- ``row_sums``: one row times each stored weight row, summed;
- ``vendor``: the vendor BLAS through our kernel (vendor_blas.py);
- ``tiled``: our register-tiled kernel (kernels/mojo_tiled/tiled_matmul.mojo);
- ``streamed``: our few-rows kernel that prefetches the weight it reads
  next (kernels/mojo_streamed/streamed_matmul.mojo);
- ``paired``: our bfloat16 kernel on the CPU's bfloat16 pair dot products
  (kernels/mojo_paired/paired_matmul.mojo);
- ``vendor_packed``: the vendor BLAS over the weight packed beforehand
  (weight_packing.py; frozen weights), never timed streamed;
- ``summed``: x and W multiplied elementwise and summed over K, in float32
  (what the ``matmul`` strategy builds for small products,
  lower/products.py; no strategy of its own).

W is stored [K, N], or [N, K] (``weight_nk``: a Linear's weight, read
transposed). The forms run interleaved, round after round, and each keeps
its median: a machine whose speed drifts favours none of them.

A product whose weight the model reads from memory (the graph's weights do
not fit the CPU's last-level cache: a decode step's) is timed *streamed*:
each call reads the next of several copies of W, so that every copy has left
the cache before it is read again. Timed on one weight, which then sits in
the cache, MKL's products were the fastest at GPT-2's batch-8 decode shapes
and the slowest once the weight came from memory (docs/benchmarks.md,
"Products that stream their weights").
"""

from __future__ import annotations

import itertools
import math
import statistics
import threading
import time
from collections.abc import Callable

import torch
from max.driver import Buffer
from max.dtype import DType
from max.engine import Model
from max.graph import DeviceRef, Graph, Module, TensorType, TensorValue, ops

from ..dtypes import dtype_name, to_max_dtype
from ..settings import PRODUCT_STRATEGIES
from ..storage.product_choices import last_level_cache_bytes
from .library import PAIRED, SHIPPED, STREAMED, TILED, MojoLibrary, custom
from .pair_dot import KERNEL as PAIRED_KERNEL
from .timing_graphs import Build, load_timing_graphs
from .vendor_blas import VENDOR_KERNELS, no_bias, vendor_blas
from .weight_packing import PackSpec, pack_weight, parts_for

# Each product strategy's form, and the sum "matmul" builds for small products.
FORMS = (*(s for s in PRODUCT_STRATEGIES if s not in ("auto", "rule")), "summed")
# Rounds at least, and the time they may take together, per shape.
_MIN_ROUNDS = 5
_BUDGET_S = 0.5
# Streamed timing: the copies of W together hold at least this many times
# the last-level cache, so each copy is read from memory.
_CACHES_OF_COPIES = 2
# Run before a timing's timed calls, after its first executes (which start
# MAX's CPU runtime): the backend's way of making that runtime run as a
# compiled graph's calls will (settle_timing_with). None: as it is.
_settle: Callable[[], object] | None = None


def settle_timing_with(settle: Callable[[], object] | None) -> None:
    """Process-wide: ``settle`` runs before the timed calls of every timing
    of forms (products here, convolutions in conv_timing.py). The backend
    passes what idles MAX's polling thread, which preempts a kernel's task
    thousands of times a second until then: timed under it, one-row
    products ran 11-33 % slower than in the graphs they were timed for, and
    the fastest form changed at some shapes (docs/benchmarks.md)."""
    global _settle
    _settle = settle


_lock = threading.Lock()
_models: dict[tuple[str, bool, torch.dtype, int], Model] = {}
# Forms timed over one layout of the weight only: row sums read it [N, K],
# and the packed weight is the asked one's.
_ONE_LAYOUT = frozenset({"row_sums", "vendor_packed"})


def _matmul(x: TensorValue, w: TensorValue, weight_nk: bool) -> TensorValue:
    return ops.matmul(x, ops.transpose(w, 0, 1) if weight_nk else w)


def _row_sums(x: TensorValue, w: TensorValue, weight_nk: bool) -> TensorValue:
    assert weight_nk, "row sums read a weight stored [N, K]"
    return ops.reshape(ops.sum(ops.mul(w, x), -1), [1, w.shape[0]])


def _summed(x: TensorValue, w: TensorValue, weight_nk: bool) -> TensorValue:
    # As lower/products.py builds a small product (which this room may not
    # import), in float32: x[M, 1, K] * W[1, N, K] summed along W's stored
    # rows, or x[M, K, 1] * W[1, K, N] summed over K.
    dtype = x.dtype
    if dtype != DType.float32:
        x, w = ops.cast(x, DType.float32), ops.cast(w, DType.float32)
    axis = -1 if weight_nk else 1
    terms = ops.unsqueeze(x, 1 if weight_nk else -1) * ops.unsqueeze(w, 0)
    out = ops.squeeze(ops.sum(terms, axis=axis), axis)
    return out if dtype == DType.float32 else ops.cast(out, dtype)


def _custom(
    kernels: MojoLibrary,
    kernel: str,
    biased: bool = False,
    **parameters: bool | int | str,
) -> Callable[[TensorValue, TensorValue, bool], TensorValue]:
    """A form by one of our kernels; ``biased``: one that takes a bias operand
    (the vendor kernels), handed an empty one."""

    def build(x: TensorValue, w: TensorValue, weight_nk: bool) -> TensorValue:
        n = w.shape[0] if weight_nk else w.shape[1]
        out = TensorType(x.dtype, [x.shape[0], n], x.device)
        bias = [no_bias(x.dtype, x.device)] if biased else []
        (y,) = custom(
            kernels,
            kernel,
            [x, w, *bias],
            [out],
            x.device,
            {**parameters, "weight_nk": weight_nk},
        )
        return y

    return build


def _builder(form: str) -> Callable[[TensorValue, TensorValue, bool], TensorValue]:
    if form == "matmul":
        return _matmul
    if form == "row_sums":
        return _row_sums
    if form == "summed":
        return _summed
    if form == "skinny":
        return _custom(SHIPPED, "torch_max_backend_skinny_matmul", rows=0)
    if form == "tiled":
        return _custom(TILED, "torch_max_backend_tiled_matmul", x_km=False)
    if form == "paired":
        return _custom(PAIRED, PAIRED_KERNEL, biased=True, x_km=False)
    if form == "streamed":
        return _custom(STREAMED, "torch_max_backend_streamed_matmul", rows=0)
    if form == "vendor":
        found = vendor_blas()
        if found is None:
            raise ValueError("no vendor BLAS on this machine")
        return _custom(
            VENDOR_KERNELS,
            "torch_max_backend_vendor_matmul",
            biased=True,
            library=found.path,
        )
    raise ValueError(f"unknown product form {form!r}; known: {', '.join(FORMS)}")


def _packed(parts: int, weight_nk: bool) -> Callable[..., TensorValue]:
    """``vendor_packed``'s product: x times the packed weight, W for its sizes."""
    found = vendor_blas()
    if found is None:
        raise ValueError("no vendor BLAS on this machine")

    def build(x: TensorValue, w: TensorValue, packed: TensorValue) -> TensorValue:
        n = w.shape[0] if weight_nk else w.shape[1]
        (y,) = custom(
            VENDOR_KERNELS,
            "torch_max_backend_vendor_packed_matmul",
            [x, packed, no_bias(x.dtype, x.device)],
            [TensorType(x.dtype, [x.shape[0], n], x.device)],
            x.device,
            {"parts": parts, "library": found.path},
        )
        return y

    return build


def _graph_name(form: str, weight_nk: bool, dtype: torch.dtype, parts: int) -> str:
    # float32's graphs name no type, as before half-precision products were timed.
    kind = "" if dtype == torch.float32 else f"_{dtype_name(dtype)}"
    packed = f"_{parts}" if form == "vendor_packed" else ""
    return f"product_timing_{form}_{'nk' if weight_nk else 'kn'}{kind}{packed}"


def _build(form: str, weight_nk: bool, dtype: torch.dtype, parts: int) -> Build:
    """How ``form``'s timing graph (symbolic sizes) is built;
    ``vendor_packed``'s takes the packed weight (``parts`` slices) after W,
    whose sizes it reads."""
    cpu = DeviceRef.CPU()
    rows = "m" if form != "row_sums" else 1
    w_shape = ["n", "k"] if weight_nk else ["k", "n"]
    operand = to_max_dtype(dtype)
    packed = form == "vendor_packed"
    # The packed bytes, held as float32 whatever the operands.
    extra = [TensorType(DType.float32, ["p"], cpu)] if packed else []
    name = _graph_name(form, weight_nk, dtype, parts)

    def build(module: Module | None) -> Graph:
        with Graph(
            name,
            input_types=[
                TensorType(operand, [rows, "k"], cpu),
                TensorType(operand, w_shape, cpu),
                *extra,
            ],
            module=module,
        ) as graph:
            x, w, *rest = (v.tensor for v in graph.inputs)
            if packed:
                graph.output(_packed(parts, weight_nk)(x, w, rest[0]))
            else:
                graph.output(_builder(form)(x, w, weight_nk))
        return graph

    return build


def _models_of(
    forms: list[str], weight_nk: bool, dtype: torch.dtype, parts: int
) -> dict[str, Model]:
    """The compiled graph of each of ``forms``, loaded once per process;
    those this process lacks are loaded or compiled together."""
    # Only the packed form's graph depends on its weight's slices.
    keys = {
        form: (form, weight_nk, dtype, parts if form == "vendor_packed" else 0)
        for form in forms
    }
    lacking = {_graph_name(*key): key for key in keys.values() if key not in _models}
    companions = []
    for form, nk, *rest in list(lacking.values()):
        # The same form over the weight read the other way comes along: a
        # training step's backward reads the forward's weights so, and in
        # one module it costs next to nothing (six bfloat16 graphs 57.9 s
        # from empty caches, three 58.6 s; docs/benchmarks.md).
        other = (form, not nk, *rest)
        if form not in _ONE_LAYOUT and other not in _models:
            lacking[_graph_name(*other)] = other
            companions.append(_graph_name(*other))
    if lacking:
        loaded = load_timing_graphs(
            {name: _build(*key) for name, key in lacking.items()},
            optional=companions,
        )
        for name, model in loaded.items():
            _models[lacking[name]] = model
    return {form: _models[key] for form, key in keys.items()}


def _weight_copies(w: torch.Tensor, streamed: bool) -> list[Buffer]:
    """W as the timed calls read it: itself (it stays in the cache), or
    ``streamed``, copies enough that each has left the last-level cache
    before it is read again."""
    if not streamed:
        return [Buffer.from_dlpack(w)]
    cache = last_level_cache_bytes() or 0
    count = max(2, math.ceil(_CACHES_OF_COPIES * cache / max(1, w.nbytes)) + 1)
    copies = torch.empty(count, *w.shape, dtype=w.dtype)
    copies.copy_(w.expand(count, *w.shape))  # written: untouched pages read as one
    return [Buffer.from_dlpack(copy) for copy in copies]


def time_forms(
    rows: int,
    k: int,
    n: int,
    weight_nk: bool,
    forms: list[str],
    streamed: bool = False,
    dtype: torch.dtype = torch.float32,
) -> dict[str, float]:
    """Median microseconds of ``x[rows, k] @ W`` (W [k, n], or [n, k] when
    ``weight_nk``) in each of ``forms``, operands of ``dtype``, W in the cache
    or (``streamed``) read from memory; every form's result is checked
    against the first's before it is timed."""
    if "vendor_packed" in forms and streamed:
        raise ValueError("vendor_packed is timed on a weight in the cache")
    parts = parts_for(n)
    with _lock:
        models = _models_of(forms, weight_nk, dtype, parts)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(rows, k, generator=gen).to(dtype)
        w = torch.randn(*((n, k) if weight_nk else (k, n)), generator=gen).to(dtype)
        # Two roundings of a sum of k terms to half precision may differ by a unit.
        rtol = 1e-3 if dtype == torch.float32 else 1e-2
        # Wrapped once, run as a compiled graph's call runs them: torch
        # tensors handed to ``execute`` cost 70-170 us of wrapping a call,
        # more than a small product itself.
        x_buffer = Buffer.from_dlpack(x)
        weights = _weight_copies(w, streamed)
        # The packed form's extra input: W packed once, as frozen weights are.
        extra: dict[str, list[Buffer]] = {form: [] for form in forms}
        if "vendor_packed" in extra:
            spec = PackSpec(rows, k, n, weight_nk, parts, dtype_name(dtype))
            extra["vendor_packed"] = [Buffer.from_dlpack(pack_weight(w, spec))]
        reference = None
        for form, model in models.items():
            (out,) = model._execute_device_tensors([x_buffer, weights[0], *extra[form]])
            result = torch.from_dlpack(out).float()
            if reference is None:
                reference = result.clone()
            elif not torch.allclose(result, reference, rtol=rtol, atol=rtol * k):
                raise RuntimeError(
                    f"product form {form!r} disagrees with {forms[0]!r} at "
                    f"[{rows}, {k}] x {'[n, k]' if weight_nk else '[k, n]'} n={n}"
                )
        copies = itertools.cycle(weights)
        return interleaved_medians(
            {
                form: lambda model=model, more=extra[form]: (
                    model._execute_device_tensors([x_buffer, next(copies), *more])
                )
                for form, model in models.items()
            },
            _MIN_ROUNDS,
            _BUDGET_S,
            max_rounds=200,
        )


def interleaved_medians(
    runs: dict[str, Callable[[], object]],
    min_rounds: int,
    budget_s: float,
    max_rounds: int,
) -> dict[str, float]:
    """Median microseconds of each of ``runs``, called in turn round after
    round, so that a machine whose speed drifts favours none of them: at
    least ``min_rounds`` rounds, more while ``budget_s`` lasts, at most
    ``max_rounds``; the runtime settled first (``settle_timing_with``)."""
    if _settle is not None:
        _settle()
    samples: dict[str, list[float]] = {name: [] for name in runs}
    started = time.perf_counter()
    rounds = 0
    while rounds < min_rounds or (
        rounds < max_rounds and time.perf_counter() - started < budget_s
    ):
        for name, run in runs.items():
            begin = time.perf_counter()
            run()
            samples[name].append((time.perf_counter() - begin) * 1e6)
        rounds += 1
    return {name: statistics.median(times) for name, times in samples.items()}
