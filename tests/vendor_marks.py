"""Skip marks for tests that need a vendor BLAS (MKL) on this machine, shared by
every test folder."""

from __future__ import annotations

import pytest

from torch_max_backend.kernels import vendor_blas


def vendor_multiplies(kind: str) -> bool:
    found = vendor_blas.vendor_blas()
    return found is not None and kind in found.half_types


needs_vendor = pytest.mark.skipif(
    vendor_blas.vendor_blas() is None, reason="no vendor BLAS (mkl) here"
)
needs_vendor_bfloat16 = pytest.mark.skipif(
    not vendor_multiplies("bfloat16"),
    reason="no vendor BLAS with bfloat16 products here",
)
