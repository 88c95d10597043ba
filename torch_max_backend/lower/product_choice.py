"""Which way a float32 product on the CPU is built: measured, per machine and shape.

mm and addmm have several strategies (lower/ops/linalg.py): MAX's matmul,
our few-rows kernels (``skinny``; ``streamed``, which prefetches the weight),
row sums for one row (``row_sums``), the vendor BLAS (``vendor``) and, in
graphs with frozen weights, the vendor BLAS over a weight packed once
(``vendor_packed``, packed_products.py). Which is fastest depends on the
machine: MAX's kernels beat MKL on an AMD EPYC and lose to it on an Intel
Xeon (docs/benchmarks.md). So, as Inductor's max-autotune times extern GEMMs
against its templates, each product shape that fits two or more strategies
is timed once per machine (kernels/product_timing.py) and the fastest is
kept in the storage cache (storage/product_choices.py): a second process
reads the choice instead of timing again, and another machine times anew.
A bfloat16 or float16 product (MAX's matmul or the vendor's half-precision
product) is timed in its own type, under keys of its own. The choice is part
of the graph's fingerprint (builder/fingerprint.py), so a warm start or a
bundle never carries a choice made on other hardware into a graph built
here.

A product in a graph whose tensors outgrow the CPU's last-level cache (a
decode step of a real model) reads its weight from memory at every call,
so its forms are timed so (``streamed``; kernels/product_timing.py): timed
on a weight that stays in the cache, MKL won GPT-2's batch-8 decode products
on an Intel Xeon and was the slowest of them in the step.

Products of fewer than 2^18 multiply-adds take the fixed rules (a kernel's
fixed cost is most of their time); up to ``products.SUMMED_PRODUCT_LIMIT``,
MAX's matmul is not among the timed forms, since there a graph may build it
as a summed product for compile time's sake; where that leaves one form, it
is timed against both that sum (``summed``) and MAX's matmul, and taken only
where it beats both. The setting
``product_strategy`` (``TORCH_MAX_BACKEND_PRODUCT_STRATEGY``) overrides:
``"auto"`` (measure, the default), ``"rule"`` (the fixed rules, no timing),
or one strategy's name for every product it fits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .. import logs
from ..dtypes import dtype_name
from ..kernels import vendor_blas
from ..settings import PRODUCT_STRATEGIES
from ..storage.product_choices import (
    ProductChoices,
    last_level_cache_bytes,
    machine_identity,
)
from .kit import size_hint
from .products import SUMMED_PRODUCT_LIMIT
from .registry import Strategy

AUTO = "auto"

_log = logs.get_logger("compile")
_setting = AUTO
_table: ProductChoices | None = None
# Smaller products take the rules: their time is mostly a kernel's fixed cost.
MIN_TIMED_WORK = 1 << 18
# Graphs that leave this machine (exported packages) never call the vendor
# library: its path is this machine's, and the AOT runner's machine may lack it.
VENDOR = "vendor"
# The vendor BLAS over a weight packed once (packed_products.py).
PACKED = "vendor_packed"
# Not a strategy: the timing form of what "matmul" builds up to
# SUMMED_PRODUCT_LIMIT multiply-adds, a sum.
SUMMED = "summed"
# Forms tied to this machine, which exported packages never take: the vendor
# library's files, and the paired kernel's AVX512-BF16 instructions (a package
# holds its graph compiled here; the AOT runner's CPU may lack them).
_MACHINE_FORMS = frozenset({VENDOR, PACKED, "paired"})
# Forms only product_strategy names. Our tiled kernel runs a product alone
# as fast as MAX's matmul, but MAX fuses the elementwise work before and
# after its own matmul into it and not into a custom kernel, so a training
# step built on the tiled kernel took about 5 % longer, while its graphs
# compiled in a quarter of the time (docs/benchmarks.md, "The tiled
# kernel"): a timing of the product alone would pick it where a step loses.
UNTIMED = frozenset({"tiled"})
_portable: ContextVar[bool] = ContextVar("max_portable_products", default=False)


@contextlib.contextmanager
def portable_products() -> Iterator[None]:
    """Products built inside take no strategy tied to this machine's files."""
    token = _portable.set(True)
    try:
        yield
    finally:
        _portable.reset(token)


def set_product_strategy(value: str) -> None:
    """Process-wide: the latest compile's ``product_strategy`` applies."""
    global _setting
    if value not in PRODUCT_STRATEGIES:
        raise ValueError(
            f"unknown product_strategy {value!r}; "
            f"known: {', '.join(PRODUCT_STRATEGIES)}"
        )
    _setting = value


@dataclass(frozen=True)
class ProductShape:
    """``x[rows, k] @ W``, W stored [k, n] or [n, k] (``weight_nk``), read
    from memory at each call (``streamed``) or from the cache."""

    rows: int
    k: int
    n: int
    weight_nk: bool
    streamed: bool = False
    dtype: torch.dtype = torch.float32

    def key(self, forms: Sequence[str]) -> str:
        layout = "nk" if self.weight_nk else "kn"
        where = " streamed" if self.streamed else ""
        # float32's keys name no type: the tables written before still hold.
        kind = "" if self.dtype == torch.float32 else f" {dtype_name(self.dtype)}"
        return (
            f"{self.rows}x{self.k}x{self.n} {layout}{kind}{where} "
            f"{','.join(sorted(forms))}"
        )


def _tensor_bytes(node: torch.fx.Node) -> int:
    meta = node.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        return 0
    sizes = [size_hint(s) for s in meta.shape]
    if any(s is None for s in sizes):
        return 0
    return math.prod(sizes) * meta.element_size()


def weights_stream(graph: torch.fx.Graph) -> bool:
    """Whether ``graph``'s inputs and constants together outgrow the CPU's
    last-level cache, so that a call reads its weights from memory."""
    cache = last_level_cache_bytes()
    if cache is None:
        return False
    held = sum(
        _tensor_bytes(node)
        for node in graph.nodes
        if node.op in ("placeholder", "get_attr")
    )
    return held > cache


def choices_here() -> ProductChoices:
    """This machine's table of timed choices (products and convolutions)."""
    global _table
    if _table is None:
        _table = ProductChoices(machine_identity(vendor_blas.describe()))
    return _table


def timed_choice(
    what: str,
    key: str,
    forms: Sequence[str],
    timing: Callable[[], dict[str, float]],
) -> str | None:
    """The fastest of ``forms`` for the ``what`` (products, convolutions)
    under ``key`` here: read from this machine's table, else timed by
    ``timing`` (medians in microseconds, a form each) and recorded; None
    when timing failed (the rules decide then)."""
    table = choices_here()
    entry = table.get(key)
    if entry is not None and entry["choice"] in forms:
        return entry["choice"]
    try:
        # Asked for inside AOTAutograd's fake mode too (the fingerprint,
        # capability checks), where torch would make the operands fake.
        with unset_fake_temporarily():
            times = timing()
    except Exception as e:  # a failed timing must not fail the compile
        _log.warning("torch-max-backend: could not time %s %s: %s", what, key, e)
        return None
    best = min(times, key=times.__getitem__)
    _log.info(
        "torch-max-backend: %s %s: %s (%s)",
        what,
        key,
        best,
        ", ".join(f"{f} {t:.0f} us" for f, t in times.items()),
    )
    table.put(key, best, times)
    return best


def measured(shape: ProductShape, forms: list[str]) -> str | None:
    """The fastest of ``forms`` for ``shape`` here, timed on first use; None
    when timing failed (the rules decide then)."""
    from ..kernels.product_timing import time_forms

    return timed_choice(
        "products",
        shape.key(forms),
        forms,
        lambda: time_forms(
            shape.rows,
            shape.k,
            shape.n,
            shape.weight_nk,
            forms,
            shape.streamed,
            dtype=shape.dtype,
        ),
    )


def choose_by_measurement(
    shape_of: Callable[[torch.fx.Node], ProductShape | None],
) -> Callable[[torch.fx.Node, Sequence[Strategy]], Strategy]:
    """A chooser for ``lowering_strategies``: the setting's strategy where it
    fits, else (``auto``) the fastest measured for the node's shape, else the
    first that fits."""

    def choose(node: torch.fx.Node, fitting: Sequence[Strategy]) -> Strategy:
        if _portable.get():
            fitting = [s for s in fitting if s.name not in _MACHINE_FORMS] or list(
                fitting
            )
        by_name = {s.name: s for s in fitting}
        if _setting in by_name:
            return by_name[_setting]
        if _setting != AUTO:
            return fitting[0]
        shape = shape_of(node)
        if shape is None:
            return fitting[0]
        work = math.prod((shape.rows, shape.k, shape.n))
        if work < MIN_TIMED_WORK:
            return fitting[0]
        names = [name for name in by_name if name not in UNTIMED]
        if work <= SUMMED_PRODUCT_LIMIT:
            # Such a "matmul" may be built as a summed product, whose speed the
            # timing graph (MAX's matmul) does not tell.
            others = [name for name in names if name != "matmul"]
            if len(others) == 1 and "matmul" in names:
                # One form beside "matmul" (the vendor's, at many rows), which
                # such a graph builds as a sum, or as MAX's matmul where it
                # holds one anyway: that form is taken where it beats both.
                # Untimed, a bfloat16 classifier head of 64x1024x10 took the
                # sum, 4x slower than the vendor form (docs/benchmarks.md).
                names = [*others, SUMMED, "matmul"]
            else:
                names = others
        if len(names) < 2:
            return fitting[0]
        # Only a product that is timed asks how its graph reads its weights.
        shape = dataclasses.replace(shape, streamed=weights_stream(node.graph))
        if shape.streamed and PACKED in names:
            # Timed streamed, each of its weight's copies would be packed too.
            names.remove(PACKED)
            if len(names) < 2:
                return fitting[0]
        best = measured(shape, names)
        if best == SUMMED:
            best = "matmul"
        return by_name.get(best, fitting[0]) if best is not None else fitting[0]

    return choose
