"""Reductions: sum, mean, amax, amin, var, any, ..."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from max.dtype import DType
from max.graph import TensorValue, ops
from max.graph.ops.reduction import max as reduce_max
from max.graph.ops.reduction import min as reduce_min

from ...dtypes import accumulation_dtype
from ..reduced_axes import in_layout, reduce_axes, reduce_runs, squeezed
from ..registry import lowering
from ..scalars import Operand, ScalarArg, as_tensor, out_max_dtype
from ..shapes import normalize_dim, normalize_dims, numel, size_value

aten = torch.ops.aten


def _wide(self: Operand) -> TensorValue:
    """``self`` in the dtype torch accumulates the node's output in: its
    kernels add half-precision values in float32 and round once at the end
    (MAX's would round at every step: float16 sums 20x further off)."""
    return as_tensor(self, accumulation_dtype(out_max_dtype()))


def _narrow(x: TensorValue) -> TensorValue:
    """An accumulated result back in the node's output dtype."""
    return as_tensor(x, out_max_dtype())


def _extreme(x: TensorValue, axis: int, largest: bool) -> TensorValue:
    """torch's max (``largest``) or min of ``x`` along ``axis``, kept.

    MAX's reductions start from the lowest (highest) finite value and skip
    NaNs: over infinities alone they give that finite value, and over values
    holding a NaN the extreme of the others, where torch gives the infinity
    and NaN.
    """
    if x.dtype == DType.bool:  # MAX fails to compile it along an inner axis
        return ops.cast(_extreme(ops.cast(x, DType.uint8), axis, largest), x.dtype)
    best = (reduce_max if largest else reduce_min)(x, axis)
    if not x.dtype.is_float():
        return best
    far = as_tensor(-math.inf if largest else math.inf, x.dtype)
    # 2 where a NaN is held, 0 where only the far infinity is, 1 otherwise.
    code = ops.where(
        ops.is_nan(x),
        as_tensor(2, DType.int32),
        ops.cast(ops.not_equal(x, far), DType.int32),
    )
    kind = reduce_max(code, axis)
    best = ops.where(ops.equal(kind, as_tensor(0, DType.int32)), far, best)
    nan = as_tensor(math.nan, x.dtype)
    return ops.where(ops.equal(kind, as_tensor(2, DType.int32)), nan, best)


def torch_max(x: TensorValue, axis: int) -> TensorValue:
    """torch's max along ``axis``, kept: -inf over -inf alone, NaN over a NaN."""
    return _extreme(x, axis, largest=True)


def torch_min(x: TensorValue, axis: int) -> TensorValue:
    """torch's min along ``axis``, kept: inf over inf alone, NaN over a NaN."""
    return _extreme(x, axis, largest=False)


@lowering(aten.sum.dim_IntList)
def sum_dim(
    self: TensorValue,
    dim: Sequence[int] | None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> TensorValue:
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _narrow(reduce_axes(_wide(self), dim, keepdim, ops.sum))


@lowering(aten.sum.default)
def sum_all(self: TensorValue, *, dtype: torch.dtype | None = None) -> TensorValue:
    """sum(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return _narrow(reduce_axes(_wide(self), None, False, ops.sum))


@lowering(aten.mean.dim)
def mean_dim(
    self: TensorValue,
    dim: Sequence[int] | None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> TensorValue:
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _narrow(reduce_axes(_wide(self), dim, keepdim, ops.mean))


@lowering(aten.mean.default)
def mean_all(self: TensorValue, *, dtype: torch.dtype | None = None) -> TensorValue:
    """mean(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return _narrow(reduce_axes(_wide(self), None, False, ops.mean))


@lowering(aten.amax.default)
def amax(
    self: TensorValue, dim: Sequence[int] = (), keepdim: bool = False
) -> TensorValue:
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return reduce_axes(self, dim, keepdim, torch_max)


@lowering(aten.amin.default)
def amin(
    self: TensorValue, dim: Sequence[int] = (), keepdim: bool = False
) -> TensorValue:
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return reduce_axes(self, dim, keepdim, torch_min)


@lowering(aten.max.default)
def max_all(self: TensorValue) -> TensorValue:
    """max(Tensor self) -> Tensor"""
    return reduce_axes(self, None, False, torch_max)


@lowering(aten.min.default)
def min_all(self: TensorValue) -> TensorValue:
    """min(Tensor self) -> Tensor"""
    return reduce_axes(self, None, False, torch_min)


def _any(
    x: TensorValue, dims: Sequence[int] | int | None, keepdim: bool
) -> TensorValue:
    as_int = ops.cast(as_tensor(x, DType.bool), DType.int32)  # NaN is true
    return ops.greater(
        reduce_axes(as_int, dims, keepdim, reduce_max), as_tensor(0, DType.int32)
    )


@lowering(aten.any.dim, aten.any.dims)
def any_dim(
    self: TensorValue, dim: int | Sequence[int] | None = None, keepdim: bool = False
) -> TensorValue:
    """any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor
    any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor
    """
    return _any(self, dim, keepdim)


@lowering(aten.any.default)
def any_all(self: TensorValue) -> TensorValue:
    """any(Tensor self) -> Tensor"""
    return _any(self, None, False)


@lowering(aten.var.correction)
def var(
    self: TensorValue,
    dim: Sequence[int] | None = None,
    *,
    correction: Operand | None = None,
    keepdim: bool = False,
) -> TensorValue:
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    return _narrow(_variance(_wide(self), dim, correction, keepdim))


def _variance(
    x: TensorValue,
    dim: Sequence[int] | None,
    correction: Operand | None,
    keepdim: bool,
) -> TensorValue:
    axes = normalize_dims(dim, x.rank)
    if x.rank == 0:
        return _variance(ops.reshape(x, [1]), None, correction, False)
    y, y_axes, back = in_layout(x, axes)
    mean = reduce_runs(y, y_axes, ops.mean)
    return squeezed(back(_kept_variance(y, y_axes, correction, mean)), axes, keepdim)


def _kept_variance(
    x: TensorValue, axes: list[int], correction: Operand | None, mean: TensorValue
) -> TensorValue:
    """The variance over ``axes`` of ``x`` about ``mean``, each axis kept."""
    centered = ops.sub(x, mean)
    total = reduce_runs(ops.mul(centered, centered), axes, ops.sum)
    count = size_value(numel(x, axes))
    if correction is None:
        correction = 1
    if isinstance(count, int) and not isinstance(correction, ScalarArg):
        # Both known here: computed in Python, since MAX would fold arithmetic
        # on constants at compile time (a kernel compile).
        dof = count - correction
        return (
            ops.div(total, as_tensor(dof, x.dtype)) if dof > 0 else _nan_or_inf(total)
        )
    count = as_tensor(count, x.dtype)
    if isinstance(correction, ScalarArg) or correction != 0:
        count = ops.sub(count, as_tensor(correction, x.dtype))
        zero = as_tensor(0, x.dtype)
        return ops.where(
            ops.greater(count, zero), ops.div(total, count), _nan_or_inf(total)
        )
    return ops.div(total, count)


def _nan_or_inf(total: TensorValue) -> TensorValue:
    """A variance with no degrees of freedom left (one element, correction 1):
    torch divides by zero, giving nan (or inf for a non-zero sum); MAX's
    division gives 0 there, so the IEEE result is chosen explicitly."""
    return ops.where(
        ops.equal(total, as_tensor(0, total.dtype)),
        as_tensor(math.nan, total.dtype),
        as_tensor(math.inf, total.dtype),
    )


@lowering(aten.cumsum.default)
def cumsum(
    self: TensorValue, dim: int, *, dtype: torch.dtype | None = None
) -> TensorValue:
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    x = _wide(self)
    if x.rank == 0:
        return _narrow(x)
    return _narrow(ops.cumsum(x, axis=normalize_dim(dim, x.rank)))


@lowering(aten.var_mean.correction)
def var_mean(
    self: TensorValue,
    dim: Sequence[int] | None = None,
    *,
    correction: Operand | None = None,
    keepdim: bool = False,
) -> tuple[TensorValue, TensorValue]:
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)"""
    x = _wide(self)
    if x.rank == 0:
        return _narrow(_variance(x, None, correction, False)), _narrow(x)
    axes = normalize_dims(dim, x.rank)
    y, y_axes, back = in_layout(x, axes)
    # One mean for both: MAX merges no repeated reductions.
    mean = reduce_runs(y, y_axes, ops.mean)
    variance = _kept_variance(y, y_axes, correction, mean)
    return (
        _narrow(squeezed(back(variance), axes, keepdim)),
        _narrow(squeezed(back(mean), axes, keepdim)),
    )


@lowering(aten.var.dim)
def var_dim(
    self: TensorValue,
    dim: Sequence[int] | None,
    unbiased: bool = True,
    keepdim: bool = False,
) -> TensorValue:
    """var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor"""
    return var(self, dim, correction=1 if unbiased else 0, keepdim=keepdim)


@lowering(aten.prod.default)
def prod_all(self: TensorValue, *, dtype: torch.dtype | None = None) -> TensorValue:
    """prod(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return _narrow(reduce_axes(_wide(self), None, False, ops.prod))


@lowering(aten.prod.dim_int)
def prod_dim(
    self: TensorValue,
    dim: int,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> TensorValue:
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    return _narrow(reduce_axes(_wide(self), dim, keepdim, ops.prod))


def power_sum(
    x: TensorValue, ord: float, dims: Sequence[int] | None = None, keepdim: bool = False
) -> TensorValue:
    """sum(|x| ** ord) over ``dims``, accumulated as torch does (float32 for
    half precision; ord 0 counts non-zeros)."""
    a = ops.abs(_wide(x))
    if ord == 0:
        a = ops.cast(as_tensor(a, DType.bool), a.dtype)  # NaN counts
    elif ord == 2:
        a = ops.mul(a, a)
    elif ord != 1:
        a = ops.pow(a, as_tensor(ord, a.dtype))
    return reduce_axes(a, dims, keepdim, ops.sum)


# ``ord`` picks the algorithm (0, inf, ...), so it stays a build-time number.
@lowering(aten.linalg_vector_norm.default, lift_scalars=False)
def linalg_vector_norm(
    self: TensorValue,
    ord: float = 2,
    dim: Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> TensorValue:
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    if ord in (math.inf, -math.inf):
        a = ops.abs(as_tensor(self, out_max_dtype()))
        return reduce_axes(a, dim, keepdim, torch_max if ord > 0 else torch_min)
    total = power_sum(self, ord, dim, keepdim)
    if ord in (0, 1):
        return _narrow(total)
    if ord == 2:
        return _narrow(ops.sqrt(total))
    return _narrow(ops.pow(total, as_tensor(1 / ord, total.dtype)))
