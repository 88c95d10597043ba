"""The vendor CPU BLAS that products may call from inside a MAX graph.

Intel's MKL (the ``mkl`` package from PyPI, a dependency on x86-64 Linux)
runs float32 products on Intel Xeons faster than MAX's matmul kernel does,
and bfloat16 and float16 ones (``cblas_gemm_bf16bf16f32``,
``cblas_gemm_f16f16f32``) several times faster (docs/benchmarks.md). Our
Mojo kernel ``torch_max_backend_vendor_matmul`` (kernels/mojo_vendor) calls
its ``cblas_sgemm`` through ``dlopen`` from MAX's
worker threads, each call single-threaded over a slice of the output: MAX's
threads are the only pool, so MKL's threading layer is set to "sequential"
when the library is found. That is process-wide for this ``libmkl_rt``:
another library calling it in the process (pip's numpy and PyTorch do not;
PyTorch links its own MKL) would then run MKL on one thread too.

Found at run time, never required: without it (another platform, the
package not installed, ``TORCH_MAX_BACKEND_VENDOR_BLAS=off``) no product
takes the vendor path and MAX's matmul computes the same results.
``TORCH_MAX_BACKEND_VENDOR_BLAS=/path/to/libmkl_rt.so.N`` names the library.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import numpy as np
from max.dtype import DType
from max.graph import DeviceRef, TensorValue, ops

from .. import logs
from .library import MojoLibrary

ENV = "TORCH_MAX_BACKEND_VENDOR_BLAS"
_OFF = {"0", "off", "false", "no", "none"}
# MKL's threading layers (mkl_service.h): 1 is sequential.
_MKL_THREADING_SEQUENTIAL = 1
# What the kernel calls; a library without all of them is not used.
_SYMBOLS = ("cblas_sgemm", "MKL_Set_Threading_Layer")
# Half-precision operands, float32 sums (MKL 2019 on; float16 2021 on): a
# product of that type takes the vendor path only where the library has it.
_HALF_SYMBOLS = {
    "bfloat16": "cblas_gemm_bf16bf16f32",
    "float16": "cblas_gemm_f16f16f32",
}

# Our kernels that call the vendor library: a package of their own, so that
# only graphs with a vendor product carry it.
VENDOR_KERNELS = MojoLibrary(
    "torch_max_backend_vendor_kernels", Path(__file__).parent / "mojo_vendor"
)

_log = logs.get_logger("compile")


def no_bias(dtype: DType, device: DeviceRef) -> TensorValue:
    """The vendor kernels' empty bias operand: a product with none. (A cast
    of a constant: MAX folds it when compiling.)"""
    empty = ops.constant(np.zeros((0,), np.float32), DType.float32, device=device)
    return empty if dtype == DType.float32 else ops.cast(empty, dtype)


@dataclass(frozen=True)
class VendorBlas:
    """A loaded vendor BLAS: its file, what it is, and the half-precision
    types (torch's names) whose products it sums in float32."""

    path: str
    name: str
    half_types: tuple[str, ...] = ()


def _mkl_candidates() -> list[Path]:
    """libmkl_rt from the ``mkl`` package's files, else beside this Python."""
    found: list[Path] = []
    try:
        dist = distribution("mkl")
    except PackageNotFoundError:
        dist = None
    if dist is not None:
        for file in dist.files or []:
            if file.name.startswith("libmkl_rt.so"):
                found.append(Path(str(dist.locate_file(file))).resolve())
    for lib_dir in {Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"}:
        found.extend(sorted(lib_dir.glob("libmkl_rt.so.*")))
    return found


def _mkl_version() -> str:
    try:
        return f"mkl {distribution('mkl').version}"
    except PackageNotFoundError:
        return "mkl"


def _load(path: Path, name: str) -> VendorBlas | None:
    try:
        lib = ctypes.CDLL(str(path))
        for symbol in _SYMBOLS:
            getattr(lib, symbol)
    except (OSError, AttributeError) as e:
        _log.info("torch-max-backend: vendor BLAS %s not usable: %s", path, e)
        return None
    # Before any product: MKL's own threads would contend with MAX's.
    lib.MKL_Set_Threading_Layer(ctypes.c_int(_MKL_THREADING_SEQUENTIAL))
    halves = tuple(
        kind for kind, symbol in _HALF_SYMBOLS.items() if hasattr(lib, symbol)
    )
    return VendorBlas(str(path), name, halves)


@functools.cache
def vendor_blas() -> VendorBlas | None:
    """The vendor BLAS of this process, loaded once; None when there is none."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() in _OFF:
        return None
    if chosen:
        found = _load(Path(chosen), _mkl_version())
        if found is None:
            raise ValueError(
                f"{ENV}={chosen!r} does not name a loadable MKL library with "
                f"{', '.join(_SYMBOLS)}"
            )
        return found
    if not sys.platform.startswith("linux"):
        return None
    for path in _mkl_candidates():
        found = _load(path, _mkl_version())
        if found is not None:
            _log.info("torch-max-backend: vendor BLAS %s (%s)", found.name, path)
            return found
    return None


def describe() -> str:
    """The vendor library in a few words, for a machine's identity."""
    found = vendor_blas()
    return "no vendor BLAS" if found is None else found.name
