"""Running products, extremes and log-sum-exps, which MAX has no kernel for
(its only scan is cumsum).

A running product is built from running sums: the magnitude as the exponent
of the cumulative sum of log-magnitudes (in float64, so that a float32
result carries no more rounding than a sequential product), the sign from
the parity of the negatives so far, and what a zero or a NaN does to every
later element handled as torch's sequential product handles it.

Running maxima and minima (with the position of each) and running
log-sum-exps are scans by an associative combination of two neighbouring
ranges (``_scan``): log2(n) rounds of whole-tensor ops along a dim whose
size is known when the graph is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..kit import all_of, arg_tensor, empty_input, static_dim, tensor_meta
from ..registry import lowering
from ..scalars import as_tensor, out_max_dtype
from ..shapes import along, index_along, normalize_dim, positions, static_size

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


_scannable = all_of(static_dim(1, 0), empty_input)


Combine = Callable[[list[TensorValue], list[TensorValue]], list[TensorValue]]


def _scan(values: list[TensorValue], axis: int, combine: Combine) -> list[TensorValue]:
    """The inclusive scan of ``values`` (tensors of one shape, combined
    together) along ``axis``. In the round of shift s every position from s
    on takes ``combine(what it held s positions before, what it holds)``, so
    after it each position covers the 2s positions ending there; ``combine``
    must be associative, its first argument the earlier range."""
    n = static_size(values[0].shape[axis])
    assert n is not None, "checked by static_dim"
    shift = 1
    while shift < n:
        earlier = [index_along(v, axis, slice(0, n - shift)) for v in values]
        later = [index_along(v, axis, slice(shift, n)) for v in values]
        combined = combine(earlier, later)
        values = [
            ops.concat([index_along(v, axis, slice(0, shift)), c], axis)
            for v, c in zip(values, combined, strict=True)
        ]
        shift *= 2
    return values


def _running_extreme(
    x: TensorValue, dim: int, maximum: bool
) -> tuple[TensorValue, TensorValue]:
    """torch's cummax/cummin: the extreme so far and where it was met last,
    or, once a NaN is met, NaN and the last NaN's position."""
    if x.rank == 0:
        return x, ops.constant(0, DType.int64, device=x.device)
    axis = normalize_dim(dim, x.rank)
    key = ops.cast(x, DType.int8) if x.dtype == DType.bool else x
    index = ops.broadcast_to(along(positions(x, axis), axis, x.rank), x.shape)
    floats = x.dtype.is_float()

    def combine(
        earlier: list[TensorValue], later: list[TensorValue]
    ) -> list[TensorValue]:
        first, second = earlier[0], later[0]
        # Ties go to the later position, as in torch's sequential loop.
        if maximum:
            take = ops.greater_equal(second, first)
        else:
            take = ops.greater_equal(first, second)
        if floats:
            nan_first = ops.is_nan(first)
            take = ops.logical_or(
                ops.is_nan(second), ops.logical_and(ops.logical_not(nan_first), take)
            )
        return [ops.where(take, b, a) for a, b in zip(earlier, later, strict=True)]

    key, index = _scan([key, index], axis, combine)
    return as_tensor(key, x.dtype), index


@lowering(aten.cummax.default, supports=_scannable)
def cummax(self: TensorValue, dim: int) -> tuple[TensorValue, TensorValue]:
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _running_extreme(self, dim, maximum=True)


@lowering(aten.cummin.default, supports=_scannable)
def cummin(self: TensorValue, dim: int) -> tuple[TensorValue, TensorValue]:
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _running_extreme(self, dim, maximum=False)


def _log_add_exp(
    earlier: list[TensorValue], later: list[TensorValue]
) -> list[TensorValue]:
    """log(exp(a) + exp(b)), right for equal infinities (whose difference is
    NaN) and NaN where either is NaN."""
    a, b = earlier[0], later[0]
    larger = ops.max(a, b)
    spread = ops.log1p(ops.exp(ops.negate(ops.abs(ops.sub(a, b)))))
    equal = ops.add(a, as_tensor(math.log(2.0), a.dtype))
    total = ops.where(ops.equal(a, b), equal, ops.add(larger, spread))
    # MAX's exp of a NaN is not NaN (see cumprod): a NaN is carried by hand.
    either_nan = ops.logical_or(ops.is_nan(a), ops.is_nan(b))
    return [ops.where(either_nan, as_tensor(float("nan"), a.dtype), total)]


def _floats_in(node: torch.fx.Node) -> str | None:
    """Floating-point inputs (torch refuses integers)."""
    if not arg_tensor(node, 0).dtype.is_floating_point:
        return f"{node.target} of integers (torch refuses them)"
    return None


@lowering(aten.logcumsumexp.default, supports=all_of(_floats_in, _scannable))
def logcumsumexp(self: TensorValue, dim: int) -> TensorValue:
    """logcumsumexp(Tensor self, int dim) -> Tensor"""
    # In float64, so that log2(n) rounds of rounding stay below what torch's
    # sequential float32 loop carries.
    x = as_tensor(self, DType.float64)
    if x.rank == 0:
        return as_tensor(x, self.dtype)
    (total,) = _scan([x], normalize_dim(dim, x.rank), _log_add_exp)
    return as_tensor(total, self.dtype)
