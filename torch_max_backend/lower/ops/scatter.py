"""Element-wise gathers and scatters along a dim, and the *_scatter view updates.

torch's gather/scatter pair index tensors with one entry per element; MAX's
``gather_nd`` and ``scatter*`` take the same form once every coordinate is
spelled out, so most lowerings here build coordinate tensors from iotas.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ...dtypes import to_torch_dtype
from ..checks import in_range, unless_refused
from ..context import current, known_arg_bounds
from ..kit import empty_input, fake_tensor
from ..registry import lowering
from ..scalars import Operand, as_tensor
from ..shapes import (
    along,
    broadcast_shape,
    normalize_dim,
    positions,
    static_size,
)

aten = torch.ops.aten


def _fit(src: TensorValue, like: TensorValue) -> TensorValue:
    """``src`` cut to the shape of ``like`` (torch reads only that corner)."""
    if all(
        static_size(a) == static_size(b) and static_size(a) is not None
        for a, b in zip(src.shape, like.shape, strict=True)
    ):
        return src
    return src[tuple(slice(0, d) for d in like.shape)]


def _index_with_elements(node: torch.fx.Node) -> str | None:
    """An index with at least one element."""
    return empty_input(node, 2)


# Losses that reach us decomposed into a gather of each row's target class:
# eager checks the targets itself and raises IndexError, where a gather
# raises RuntimeError. Told by name: the overload a node's meta records in
# our graphs compared unequal to torch.ops.aten's, the names equal.
_TARGET_LOOKUPS = {"aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default"}


def _gather_refusal(size: object) -> tuple[str, str | None]:
    """The error (and message) a gather's index out of range raises."""
    loss = str(current().node.meta.get("original_aten"))
    if loss in _TARGET_LOOKUPS:
        return (
            "IndexError",
            f"Target is out of bounds: not one of {size} classes ({loss})",
        )
    return "RuntimeError", None


@lowering(aten.gather.default, supports=_index_with_elements)
def gather(
    self: TensorValue, dim: int, index: TensorValue, *, sparse_grad: bool = False
) -> TensorValue:
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"""
    if self.rank == 0:
        _ = in_range(index, 1, 0, "RuntimeError", wraps=False)
        return ops.reshape(self, list(index.shape))
    axis = normalize_dim(dim, self.rank)
    error, message = _gather_refusal(self.shape[axis])
    index, _ = in_range(
        index,
        self.shape[axis],
        axis,
        error,
        wraps=False,
        message=message,
        known=known_arg_bounds(2, "index"),
    )
    coords = []
    for d in range(index.rank):
        if d == axis:
            coords.append(index)
        else:
            iota = along(positions(index, d), d, index.rank)
            coords.append(ops.broadcast_to(iota, list(index.shape)))
    return ops.gather_nd(self, ops.stack(coords, axis=-1))


def _checked(
    self: TensorValue, dim: int, index: TensorValue
) -> tuple[TensorValue, TensorValue | None]:
    """A scatter's index checked against ``self``'s size along ``dim`` (eager
    raises for one out of range, negative ones included), and whether the
    check refused the call."""
    axis = normalize_dim(dim, self.rank) if self.rank else 0
    size = self.shape[axis] if self.rank else 1
    known = known_arg_bounds(2, "index")
    return in_range(index, size, axis, "RuntimeError", wraps=False, known=known)


def _scatter_with(
    fn: Callable[..., TensorValue],
    self: TensorValue,
    dim: int,
    index: TensorValue,
    src: TensorValue,
) -> TensorValue:
    if self.rank == 0:
        return ops.reshape(src, [])
    axis = normalize_dim(dim, self.rank)
    return fn(self, _fit(src, index), ops.cast(index, DType.int64), axis=axis)


@lowering(aten.scatter.src)
def scatter_src(
    self: TensorValue, dim: int, index: TensorValue, src: TensorValue
) -> TensorValue:
    """scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    index, refused = _checked(self, dim, index)
    written = _scatter_with(ops.scatter, self, dim, index, as_tensor(src, self.dtype))
    return unless_refused(refused, written, self)


@lowering(aten.scatter.value)
def scatter_value(
    self: TensorValue, dim: int, index: TensorValue, value: Operand
) -> TensorValue:
    """scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor"""
    src = ops.broadcast_to(as_tensor(value, self.dtype), list(index.shape))
    index, refused = _checked(self, dim, index)
    return unless_refused(
        refused, _scatter_with(ops.scatter, self, dim, index, src), self
    )


@lowering(aten.scatter_add.default)
def scatter_add(
    self: TensorValue, dim: int, index: TensorValue, src: TensorValue
) -> TensorValue:
    """scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    index, refused = _checked(self, dim, index)
    src = as_tensor(src, self.dtype)
    written = _scatter_with(ops.scatter_add, self, dim, index, src)
    return unless_refused(refused, written, self)


def _identity(reduce: str, dtype: DType) -> float | int:
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    big: float | int = (
        float("inf") if dtype.is_float() else torch.iinfo(to_torch_dtype(dtype)).max
    )
    return -big if reduce == "amax" else big


_REDUCERS: dict[str, Callable[..., TensorValue]] = {
    "sum": ops.scatter_add,
    "mean": ops.scatter_add,
    "prod": ops.scatter_mul,
    "amax": ops.scatter_max,
    "amin": ops.scatter_min,
}


@lowering(aten.scatter_reduce.two)
def scatter_reduce(
    self: TensorValue,
    dim: int,
    index: TensorValue,
    src: TensorValue,
    reduce: str,
    *,
    include_self: bool = True,
) -> TensorValue:
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor"""
    index, refused = _checked(self, dim, index)
    reduced = _reduced(self, dim, index, src, reduce, include_self)
    return unless_refused(refused, reduced, self)


def _reduced(
    self: TensorValue,
    dim: int,
    index: TensorValue,
    src: TensorValue,
    reduce: str,
    include_self: bool,
) -> TensorValue:
    src = as_tensor(src, self.dtype)
    base = self
    if not include_self:
        # Positions that receive values start from the reduction's identity.
        fill = ops.broadcast_to(
            as_tensor(_identity(reduce, self.dtype), self.dtype), list(index.shape)
        )
        base = _scatter_with(ops.scatter, self, dim, index, fill)
    total = _scatter_with(_REDUCERS[reduce], base, dim, index, src)
    if reduce in ("amax", "amin") and self.dtype.is_float():
        return _with_nans_kept(total, base, dim, index, src)
    if reduce != "mean":
        return total
    ones = ops.broadcast_to(as_tensor(1, self.dtype), list(index.shape))
    start = as_tensor(1 if include_self else 0, self.dtype)
    counts = _scatter_with(
        ops.scatter_add, ops.broadcast_to(start, list(self.shape)), dim, index, ones
    )
    untouched = ops.equal(counts, as_tensor(0, self.dtype))
    safe = ops.where(untouched, as_tensor(1, self.dtype), counts)
    mean = ops.div(total, safe) if self.dtype.is_float() else ops.floor_div(total, safe)
    return ops.where(untouched, self, mean)


def _with_nans_kept(
    total: TensorValue,
    base: TensorValue,
    dim: int,
    index: TensorValue,
    src: TensorValue,
) -> TensorValue:
    """``total`` of a max or min scatter, NaN where a NaN was reduced: MAX's
    scatter_max and scatter_min skip NaNs, torch's keep them."""
    dt = base.dtype
    nans = _scatter_with(
        ops.scatter_add,
        ops.cast(ops.is_nan(base), dt),
        dim,
        index,
        ops.cast(ops.is_nan(src), dt),
    )
    reduced_a_nan = ops.greater(nans, as_tensor(0, dt))
    return ops.where(reduced_a_nan, as_tensor(float("nan"), dt), total)


@lowering(aten.masked_scatter.default)
def masked_scatter(
    self: TensorValue, mask: TensorValue, source: TensorValue
) -> TensorValue:
    """masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor"""
    # The result takes the broadcast shape of self and mask, as torch's does.
    shape = broadcast_shape([self, mask])
    self = ops.broadcast_to(self, shape)
    flat_mask = ops.reshape(ops.broadcast_to(mask, shape), [-1])
    # The k-th true position takes source's k-th element: a running count.
    taken = ops.cumsum(ops.cast(flat_mask, DType.int64), axis=0)
    which = ops.max(
        ops.sub(taken, as_tensor(1, DType.int64)), as_tensor(0, DType.int64)
    )
    picked = ops.gather(ops.reshape(as_tensor(source, self.dtype), [-1]), which, axis=0)
    return ops.where(ops.reshape(flat_mask, shape), ops.reshape(picked, shape), self)


@lowering(aten.nonzero.default)
def nonzero(self: TensorValue) -> TensorValue:
    """nonzero(Tensor self) -> Tensor"""
    count = fake_tensor(current().node).shape[0]
    # torch names the data-dependent row count with an unbacked symbol; MAX
    # takes a symbolic dim of the same name.
    x = self if self.rank else ops.reshape(self, [1])
    out = ops.nonzero(x, out_dim=str(count))
    return out if self.rank else ops.reshape(out, [out.shape[0], 0])
