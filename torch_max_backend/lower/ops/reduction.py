"""Reductions: sum, mean, amax, amin, var, any, ..."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import torch
from max.dtype import DType
from max.graph import TensorValue, ops
from max.graph.ops.reduction import max as reduce_max
from max.graph.ops.reduction import min as reduce_min

from ...dtypes import accumulation_dtype
from ..context import current
from ..layout import ChannelsLastTwins, permute_dims
from ..registry import lowering
from ..scalars import Operand, ScalarArg, as_tensor, out_max_dtype
from ..shapes import normalize_dim, normalize_dims, numel, size_value, static_size

aten = torch.ops.aten

Reducer = Callable[[TensorValue, int], TensorValue]


def _wide(self: Operand) -> TensorValue:
    """``self`` in the dtype torch accumulates the node's output in: its
    kernels add half-precision values in float32 and round once at the end
    (MAX's would round at every step: float16 sums 20x further off)."""
    return as_tensor(self, accumulation_dtype(out_max_dtype()))


def _narrow(x: TensorValue) -> TensorValue:
    """An accumulated result back in the node's output dtype."""
    return as_tensor(x, out_max_dtype())


def reduce_axes(
    x: TensorValue, dims: Sequence[int] | int | None, keepdim: bool, fn: Reducer
) -> TensorValue:
    """``fn`` over each of ``dims`` (MAX reduces one axis, keeping it).

    A value with a channels-last twin (a conv net's activation) is reduced
    in the twin: batch norm's statistics over N, H, W then read [N*H*W, C]
    rows once instead of a permute's NCHW copy.
    """
    if x.rank == 0:
        return fn(ops.reshape(x, [1]), 0).reshape([])
    axes = normalize_dims(dims, x.rank)
    y, y_axes, back = _in_layout(x, axes)
    return _squeezed(back(_reduce_runs(y, y_axes, fn)), axes, keepdim)


def _squeezed(x: TensorValue, axes: list[int], keepdim: bool) -> TensorValue:
    """A kept reduction over ``axes`` without them unless ``keepdim``."""
    if not keepdim:
        for axis in reversed(axes):
            x = ops.squeeze(x, axis)
    return x


def _in_layout(
    x: TensorValue, axes: list[int]
) -> tuple[TensorValue, list[int], Callable[[TensorValue], TensorValue]]:
    """The value to reduce ``x``'s ``axes`` in, those axes there, and the map
    of a kept result back to ``x``'s layout: the value ``x`` permutes where
    there is one (a channels-last twin, a convolution's C, N, H, W product),
    else ``x`` itself."""
    twins = _twins()
    found = None if twins is None else twins.source(x)
    if twins is None or found is None or len(axes) == x.rank:
        return x, axes, lambda kept: kept
    source, perm = found
    if source.rank != x.rank:
        return x, axes, lambda kept: kept
    if twins.twin(x) is source:
        back = twins.channels_first
    else:
        back = partial(permute_dims, perm=perm)
    return source, sorted(perm[a] for a in axes), back


def _twins() -> ChannelsLastTwins | None:
    """The graph's channels-last twins, or None outside the graph builder."""
    try:
        return current().twins
    except RuntimeError:
        return None


def _reduce_runs(x: TensorValue, axes: list[int], fn: Reducer) -> TensorValue:
    """``fn`` over ``axes`` (sorted), each dim kept with size 1.

    Adjacent axes of static sizes are reduced as one merged axis, the
    innermost run first: NCHW's (0, 2, 3) is one pass over rows of H*W then
    one over N, where a reduction per axis wrote two large partial results
    (a batch norm's statistics: 3 passes of 6, all over non-inner axes).
    Any associative reduction (sum, mean of equal groups, max, min, prod)
    gives the same value merged.
    """
    runs: list[list[int]] = []
    for axis in axes:
        if runs and runs[-1][-1] == axis - 1 and _static_run([*runs[-1], axis], x):
            runs[-1].append(axis)
        else:
            runs.append([axis])
    for run in reversed(runs):
        if len(run) == 1:
            x = fn(x, run[0])
            continue
        shape = list(x.shape)
        first, last = run[0], run[-1]
        merged = math.prod(int(shape[a]) for a in run)
        x = fn(ops.reshape(x, [*shape[:first], merged, *shape[last + 1 :]]), first)
        x = ops.reshape(x, [*shape[:first], *([1] * len(run)), *shape[last + 1 :]])
    return x


def _static_run(run: list[int], x: TensorValue) -> bool:
    return all(static_size(x.shape[a]) is not None for a in run)


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
    y, y_axes, back = _in_layout(x, axes)
    mean = _reduce_runs(y, y_axes, ops.mean)
    return _squeezed(back(_kept_variance(y, y_axes, correction, mean)), axes, keepdim)


def _kept_variance(
    x: TensorValue, axes: list[int], correction: Operand | None, mean: TensorValue
) -> TensorValue:
    """The variance over ``axes`` of ``x`` about ``mean``, each axis kept."""
    centered = ops.sub(x, mean)
    total = _reduce_runs(ops.mul(centered, centered), axes, ops.sum)
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
    y, y_axes, back = _in_layout(x, axes)
    # One mean for both: MAX merges no repeated reductions.
    mean = _reduce_runs(y, y_axes, ops.mean)
    variance = _kept_variance(y, y_axes, correction, mean)
    return (
        _narrow(_squeezed(back(variance), axes, keepdim)),
        _narrow(_squeezed(back(mean), axes, keepdim)),
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
