"""Cumulative products of floats, which MAX has no kernel for.

A running product is built from running sums: the magnitude as the exponent
of the cumulative sum of log-magnitudes (in float64, so that a float32
result carries no more rounding than a sequential product), the sign from
the parity of the negatives so far, and what a zero or a NaN does to every
later element handled as torch's sequential product handles it.
"""

from __future__ import annotations

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..kit import tensor_meta
from ..registry import lowering
from ..scalars import as_tensor, out_max_dtype
from ..shapes import normalize_dim

aten = torch.ops.aten


def _floats_only(node: torch.fx.Node) -> str | None:
    """Floating-point results (an integer product must be exact)."""
    meta = tensor_meta(node)
    if meta is None or not meta.dtype.is_floating_point:
        return "cumprod of integers (its product must be exact)"
    return None


def _count(flags: TensorValue, axis: int) -> TensorValue:
    """How many flags are set at or before each position along ``axis``."""
    return ops.cumsum(ops.cast(flags, DType.int64), axis=axis)


def _seen(flags: TensorValue, axis: int) -> TensorValue:
    """Whether a flag was set at or before each position along ``axis``."""
    return ops.greater(_count(flags, axis), as_tensor(0, DType.int64))


@lowering(aten.cumprod.default, supports=_floats_only)
def cumprod(
    self: TensorValue, dim: int, *, dtype: torch.dtype | None = None
) -> TensorValue:
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    out = out_max_dtype()
    x = as_tensor(self, DType.float64)
    if x.rank == 0:
        return as_tensor(x, out)
    axis = normalize_dim(dim, x.rank)
    zero = as_tensor(0.0, DType.float64)
    is_zero = ops.equal(x, zero)
    magnitude = ops.abs(x)
    logs = ops.log(ops.where(is_zero, as_tensor(1.0, DType.float64), magnitude))
    product = ops.exp(ops.cumsum(logs, axis=axis))
    negatives = _count(ops.greater(zero, x), axis)
    odd = ops.equal(
        ops.mod(negatives, as_tensor(2, DType.int64)), as_tensor(1, DType.int64)
    )
    product = ops.where(odd, ops.negate(product), product)
    # After a zero the product is 0, unless an infinity meets it (NaN).
    zeroed = _seen(is_zero, axis)
    infinite = _seen(ops.is_inf(x), axis)
    nan = as_tensor(float("nan"), DType.float64)
    product = ops.where(
        zeroed, ops.where(infinite, nan, ops.mul(product, zero)), product
    )
    # A NaN so far makes the product NaN (exp of a NaN sum is inf in MAX).
    product = ops.where(_seen(ops.is_nan(x), axis), nan, product)
    return as_tensor(product, out)
