"""Matrix products, and which of two forms a graph builds them in.

MAX compiles its matmul kernel afresh into every graph that has one: on the
CPU a graph's first product costs about 50 s of compile and each further
shape about 4 s, against about 0.6 s for an elementwise kernel
(``python -m benchmarks.compile_kernels``, docs/benchmarks.md). A small
product built as its operands broadcast against each other, multiplied and
summed over K is an elementwise product fused into a reduction: it compiles
in about a second and runs within tens of microseconds of the matmul kernel
at the sizes allowed here (``SUMMED_PRODUCT_LIMIT``).

A graph gains only when none of its products needs the matmul kernel: one
large product pays the kernel's compile, and the small ones then run faster
as matmuls for 4 s each. The walk records the forms it built
(``ProductForms``), and the builder builds a graph that mixed them again with
matmuls throughout (``builder/__init__.py``). Products on other devices,
and those with symbolic sizes, are always matmuls.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from max.dtype import DType
from max.graph import DeviceRef, Dim, TensorValue, ops

from .float32_products import matmul
from .shapes import index_along, static_size

# The largest product built as a sum, in multiply-adds (batch x M x K x N):
# the LM head of a 64-wide model with a 1000-token vocabulary over 32 tokens,
# or its gradient, is 2.05 million. Within it a summed product runs within
# about 65 us of MAX's matmul per call (up to 1.8x slower at 2 million,
# faster below 100,000); past it the matmul pulls away, 2.8x at 8 million
# (benchmarks.small_products, docs/benchmarks.md, Intel Xeon 2 cores).
SUMMED_PRODUCT_LIMIT = 1 << 21
# From about here up a summed product runs slower than MAX's matmul: a graph
# with one this large is worth the matmul's compile once it runs
# (pipeline/product_upgrade.py; the model check's T5 and llama, 32 x 64 x 64 products,
# ran 2-3x slower summed, AMD EPYC).
MATMUL_FASTER_FROM = 1 << 17
# ... and over this many rows (M): a product of fewer is a few dot products
# a matrix, with nothing for the matmul's register blocking to reuse. A
# decode step's attention (one query row a head, a group's few under
# grouped-query attention) ran no faster on MAX's matmul: eight layers at
# batch 8 took 2.6 ms summed against 3.2, 3.1 against 2.8 with two rows a
# group, and as long either way at 4 and 8 rows; meanwhile the upgrade's
# compile, beside the decode, halved its tokens a second for the minutes it
# took (Intel Xeon 2 cores, docs/benchmarks.md).
MATMUL_FASTER_ROWS = 9

_HALF = (DType.float16, DType.bfloat16)


class ProductForms:
    """Which forms a graph's products were built in, and whether sums may be."""

    def __init__(self, sums_allowed: bool = True) -> None:
        self.sums_allowed = sums_allowed
        self.summed = 0
        self.matmuls = 0
        # Multiply-adds of the largest product built as a sum that MAX's
        # matmul may run faster (of MATMUL_FASTER_ROWS rows or more).
        self.largest_upgradable_sum = 0

    @property
    def mixed(self) -> bool:
        return self.summed > 0 and self.matmuls > 0


_CURRENT: ContextVar[ProductForms | None] = ContextVar(
    "max_product_forms", default=None
)


@contextlib.contextmanager
def recording_products(forms: ProductForms) -> Iterator[None]:
    """Products built inside are recorded in ``forms`` and follow its choice."""
    token = _CURRENT.set(forms)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def _static_sizes(a: TensorValue, b_shape: list[Dim]) -> tuple[list[int], int] | None:
    """The static shape of ``a @ b`` (batch dims broadcast) and its K, or
    None when a size is symbolic."""
    if any(static_size(d) is None for d in [*a.shape, *b_shape]):
        return None
    m, k, n = int(a.shape[-2]), int(a.shape[-1]), int(b_shape[-1])
    batch_a = [int(d) for d in a.shape[:-2]]
    batch_b = [int(d) for d in b_shape[:-2]]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    batch = [x if y == 1 else y for x, y in zip(batch_a, batch_b, strict=True)]
    return [*batch, m, n], k


def summed(a: TensorValue, b: TensorValue) -> TensorValue:
    """``a @ b`` as ``a[..., M, K, 1] * b[..., 1, K, N]`` summed over K (in
    float32 for half-precision operands, as MAX's matmul accumulates)."""
    return _summed(a, b, -1, -2)


def summed_along_rows(a: TensorValue, rows: TensorValue) -> TensorValue:
    """``a @ rows^T`` (``rows`` [..., N, K]) as ``a[..., M, 1, K] *
    rows[..., 1, N, K]`` summed over K: each of ``rows``' rows read where it
    lies, with no transposed copy of ``rows`` made first."""
    return _summed(a, rows, -2, -1)


def _summed(a: TensorValue, b: TensorValue, a_axis: int, k_axis: int) -> TensorValue:
    """``a`` unsqueezed at ``a_axis`` times ``b`` unsqueezed at -3, summed
    over ``k_axis``, in float32 for half-precision operands."""
    dtype = a.dtype
    if dtype in _HALF:
        a, b = ops.cast(a, DType.float32), ops.cast(b, DType.float32)
    product = ops.mul(ops.unsqueeze(a, a_axis), ops.unsqueeze(b, -3))
    out = ops.squeeze(ops.sum(product, axis=k_axis), k_axis)
    return ops.cast(out, dtype) if dtype in _HALF else out


def _empty(a: TensorValue, b: TensorValue, shape: list[int]) -> TensorValue:
    """The empty result of ``a @ b``, taken from the operand holding the
    empty dim: from a constant, MAX would fold what follows at compile time."""
    empty_in_a = 0 in [int(d) for d in a.shape[:-1]]
    source = a if empty_in_a else b
    axis = source.rank - (1 if empty_in_a else 2)
    return ops.broadcast_to(index_along(source, axis, slice(0, 1)), shape)


def product(
    a: TensorValue, b: TensorValue, *, stored_rows: bool = False
) -> TensorValue:
    """``a`` [..., M, K] times ``b`` [..., K, N], batch dims broadcast, as
    ops.matmul takes them; zeros where K is 0 (MAX's kernel then leaves its
    output unwritten and skips an epilogue fused into it, where eager sums
    nothing); a sum when small, on the CPU, in a graph that allows it.
    ``stored_rows``: ``b`` is the 2-d transposed view of a weight stored
    [N, K] (a Linear's), whose rows a sum then reads where they lie:
    reducing the view's non-inner K took a 64x1024x10 product 291 us
    against 88 (docs/benchmarks.md). A matmul is built as without it."""
    rows = (lambda: ops.transpose(b, 0, 1)) if stored_rows and b.rank == 2 else None
    return _product(a, list(b.shape), lambda: b, rows)


def product_by_rows(a: TensorValue, rows: TensorValue) -> TensorValue:
    """``a`` [..., M, K] times ``rows`` [..., N, K] transposed, as
    ``product``: a sum reads each of ``rows``' rows where it lies, and only a
    matmul is given the transpose (attention's scores: a decode step's copy
    of each layer's transposed key cache was a kernel of its own)."""
    shape = [*rows.shape[:-2], rows.shape[-1], rows.shape[-2]]
    return _product(a, shape, lambda: ops.transpose(rows, -1, -2), lambda: rows)


def _product(
    a: TensorValue,
    b_shape: list[Dim],
    make_b: Callable[[], TensorValue],
    make_rows: Callable[[], TensorValue] | None,
) -> TensorValue:
    if static_size(a.shape[-1]) == 0:
        zero = ops.constant(0, a.dtype, device=a.device)
        return ops.broadcast_to(zero, [*a.shape[:-1], b_shape[-1]])
    sizes = _static_sizes(a, b_shape)
    if sizes is not None and 0 in sizes[0]:
        # Nothing to compute; MAX failed to compile a summed product with an
        # empty dim ("statically known dimensions must match").
        return _empty(a, make_b(), sizes[0])
    size = None if sizes is None else math.prod(sizes[0]) * sizes[1]
    m = None if sizes is None else sizes[0][-2]
    if _as_sum(size, m, a.device):
        if make_rows is None:
            return summed(a, make_b())
        return summed_along_rows(a, make_rows())
    return matmul(a, make_b())


def _as_sum(size: int | None, rows: int | None, device: DeviceRef) -> bool:
    """Whether a product of ``size`` multiply-adds over ``rows`` rows (None:
    unknown) is built as a sum; recorded in the graph's forms either way."""
    forms = _CURRENT.get()
    if (
        forms is not None
        and forms.sums_allowed
        and device.is_cpu()
        and size is not None
        and size <= SUMMED_PRODUCT_LIMIT
    ):
        forms.summed += 1
        if rows is None or rows >= MATMUL_FASTER_ROWS:
            forms.largest_upgradable_sum = max(forms.largest_upgradable_sum, size)
        return True
    if forms is not None:
        forms.matmuls += 1
    return False


def _bounded_size(bound: int | None, *dims: Dim) -> int | None:
    """``bound`` times the static ``dims``: the most multiply-adds of a
    product whose run-time size is at most ``bound``; None when unknown."""
    sizes = [static_size(d) for d in dims]
    if bound is None or any(s is None for s in sizes):
        return None
    return bound * math.prod(s for s in sizes if s is not None)


def group_product(a: TensorValue, b: TensorValue, most_rows: int | None) -> TensorValue:
    """``a`` [G, K] times ``b`` [K, N] (K not 0) for one group of a grouped
    product: G is known only at run time, at most ``most_rows`` (None:
    unbounded), and the form is chosen as ``product`` would choose it for
    that many rows."""
    size = _bounded_size(most_rows, a.shape[-1], b.shape[-1])
    return summed(a, b) if _as_sum(size, most_rows, a.device) else matmul(a, b)


def group_contraction(
    a: TensorValue, b: TensorValue, most: int | None, any_rows: TensorValue
) -> TensorValue:
    """``a`` [M, G] times ``b`` [G, N] summed over one group of G (a weight
    gradient of a grouped product): G known only at run time, at most
    ``most``; ``any_rows`` (a bool scalar) says whether the group has any.
    A group with none gives zeros, where MAX's matmul leaves its output
    unwritten."""
    size = _bounded_size(most, a.shape[0], b.shape[-1])
    if _as_sum(size, static_size(a.shape[0]), a.device):
        return summed(a, b)
    zero = ops.constant(0, a.dtype, device=a.device)
    return ops.where(any_rows, matmul(a, b), zero)
