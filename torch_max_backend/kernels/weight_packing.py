"""Weights packed once by MKL for the products of graphs with frozen weights.

MKL's ``cblas_sgemm`` packs its weight into its own blocked layout at every
call; ``cblas_sgemm_pack`` does that once and ``cblas_sgemm_compute`` reads
the packed form. At the 64 to 128 rows of a batch's Linear layers that pass
is a sixth of the product: in a MAX graph on an Intel Xeon, packed products
ran 13-17 % faster than MAX's matmul (docs/benchmarks.md). A packed weight
is a copy, right only while the weight is unchanged, so only graphs compiled
with ``frozen_weights`` use it, and our call path packs again whenever the
weight tensor is another one, moved, or changed by a torch in-place op (its
version counter): see runtime/compiled_graph.py.

The layout (the kernel kernels/mojo_vendor/vendor_packed_matmul.mojo reads
the same): the weight's N columns in ``parts`` slices of ``ceil(N / parts)``,
one a MAX task, each slice packed for M rows, the slices one after another,
each padded to a multiple of 64 bytes; held in a float32 tensor whatever the
operands' type (bfloat16 and float16 weights pack too, where MKL has
``cblas_gemm_bf16bf16f32_pack`` or ``cblas_gemm_f16f16f32_pack``).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
from dataclasses import dataclass

import torch

from ..dtypes import dtype_name
from .vendor_blas import vendor_blas

# Per operand type (torch's name): MKL's packed-size, pack and compute
# functions. A type whose three the library lacks packs nothing.
FUNCTIONS = {
    "float32": ("cblas_sgemm_pack_get_size", "cblas_sgemm_pack", "cblas_sgemm_compute"),
    "bfloat16": (
        "cblas_gemm_bf16bf16f32_pack_get_size",
        "cblas_gemm_bf16bf16f32_pack",
        "cblas_gemm_bf16bf16f32_compute",
    ),
    "float16": (
        "cblas_gemm_f16f16f32_pack_get_size",
        "cblas_gemm_f16f16f32_pack",
        "cblas_gemm_f16f16f32_compute",
    ),
}
# A packing's operand type, as a PACKED input's sizes carry it: its place here.
_TYPE_CODES = tuple(FUNCTIONS)
_ROW_MAJOR = 101
_NO_TRANS = 111
_TRANS = 112
_B_MATRIX = 162
# Each slice's packed bytes start on this boundary.
_ALIGN_BYTES = 64


@dataclass(frozen=True)
class PackSpec:
    """How one weight is packed: for ``rows`` rows of a product with ``k``
    and ``n``, W stored [k, n], or [n, k] when ``weight_nk``, in ``parts``
    slices of its columns; its operands of ``dtype`` (torch's name). A
    weight stored as float32 and converted by the graph (autocast's cast of a
    parameter) has ``stored`` "float32": it is converted as torch converts
    (to nearest, ties to even), then packed."""

    rows: int
    k: int
    n: int
    weight_nk: bool
    parts: int
    dtype: str = "float32"
    stored: str = ""

    def __post_init__(self) -> None:
        # One spelling of "stored as its operands' type": the empty one, so
        # that equal packings compare (and key plans) equal.
        if self.stored == self.dtype:
            object.__setattr__(self, "stored", "")

    @property
    def stored_dtype(self) -> str:
        """The weight's type as the caller hands it over."""
        return self.stored or self.dtype

    def as_list(self) -> list[int]:
        return [
            self.rows,
            self.k,
            self.n,
            int(self.weight_nk),
            self.parts,
            _TYPE_CODES.index(self.dtype),
            _TYPE_CODES.index(self.stored_dtype),
        ]

    @classmethod
    def from_list(cls, values: list[int]) -> PackSpec:
        rows, k, n, nk, parts, kind, stored = values
        return cls(rows, k, n, bool(nk), parts, _TYPE_CODES[kind], _TYPE_CODES[stored])


@functools.cache
def _library() -> ctypes.CDLL | None:
    found = vendor_blas()
    if found is None:
        return None
    lib = ctypes.CDLL(found.path)
    for size_of, _, _ in FUNCTIONS.values():
        if hasattr(lib, size_of):
            getattr(lib, size_of).restype = ctypes.c_size_t
            getattr(lib, size_of).argtypes = [ctypes.c_int] * 4
    return lib


def packs(dtype: str) -> bool:
    """Whether this process's vendor BLAS packs weights of ``dtype``
    (torch's name: float32, bfloat16, float16)."""
    lib = _library()
    names = FUNCTIONS.get(dtype)
    return lib is not None and names is not None and all(hasattr(lib, f) for f in names)


def parts_for(n: int) -> int:
    """How many column slices a weight of ``n`` columns is packed in: one a
    usable CPU (a MAX task each), none under 64 columns wide."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    return max(1, min(cpus or os.cpu_count() or 1, n // 64))


def _slices(spec: PackSpec) -> list[tuple[int, int, int]]:
    """(first column, columns, bytes padded) of each slice of ``spec``."""
    lib = _library()
    assert lib is not None
    size_of = getattr(lib, FUNCTIONS[spec.dtype][0])
    block = math.ceil(spec.n / spec.parts)
    found = []
    for p in range(spec.parts):
        first = p * block
        cols = min(spec.n, first + block) - first
        if cols <= 0:
            break
        size = size_of(_B_MATRIX, spec.rows, cols, spec.k)
        found.append((first, cols, math.ceil(size / _ALIGN_BYTES) * _ALIGN_BYTES))
    return found


def packed_length(spec: PackSpec) -> int:
    """float32 values that hold ``spec``'s packed weight, whatever its
    operands' type (the kernel reads the bytes)."""
    return sum(size for _, _, size in _slices(spec)) // 4


def pack_listed(weight: torch.Tensor, packing: tuple[int, ...]) -> torch.Tensor:
    """``pack_weight`` by a PACKED input's sizes (``PackSpec.as_list``)."""
    return pack_weight(weight, PackSpec.from_list(list(packing)))


def pack_weight(weight: torch.Tensor, spec: PackSpec) -> torch.Tensor:
    """``weight`` packed as ``spec`` says: a new float32 CPU tensor."""
    lib = _library()
    if lib is None or not packs(spec.dtype):
        raise RuntimeError(
            f"torch-max-backend: no vendor BLAS that packs {spec.dtype} weights"
        )
    expected = (spec.n, spec.k) if spec.weight_nk else (spec.k, spec.n)
    stored = spec.stored_dtype
    if tuple(weight.shape) != expected or dtype_name(weight.dtype) != stored:
        raise ValueError(
            f"torch-max-backend: a packed weight must be {stored} "
            f"{list(expected)}, not {weight.dtype} {list(weight.shape)}"
        )
    weight = weight.detach()
    if stored != spec.dtype:
        weight = weight.to(getattr(torch, spec.dtype))
    weight = weight.contiguous()
    slices = _slices(spec)
    packed = torch.empty(packed_length(spec), dtype=torch.float32)
    pack = getattr(lib, FUNCTIONS[spec.dtype][1])
    at = packed.data_ptr()
    for first, cols, size in slices:
        if spec.weight_nk:  # rows [first, first + cols) of [n, k], read transposed
            source, trans, lead = weight[first : first + cols], _TRANS, spec.k
        else:  # columns [first, first + cols) of [k, n]
            source, trans, lead = weight[:, first:], _NO_TRANS, spec.n
        # sgemm's packing takes alpha; the half-precision ones do not.
        alpha = [ctypes.c_float(1.0)] if spec.dtype == "float32" else []
        pack(
            ctypes.c_int(_ROW_MAJOR),
            ctypes.c_int(_B_MATRIX),
            ctypes.c_int(trans),
            ctypes.c_int(spec.rows),
            ctypes.c_int(cols),
            ctypes.c_int(spec.k),
            *alpha,
            ctypes.c_void_p(source.data_ptr()),
            ctypes.c_int(lead),
            ctypes.c_void_p(at),
        )
        at += size
    return packed
