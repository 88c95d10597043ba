"""Sorting and selection: sort (stable too), topk; searchsorted.

MAX's top_k/bottom_k select along any axis on CPU (the last axis on GPU);
a full sort is a top_k of the whole axis. MAX's selection leaves a row that
holds a NaN unsorted, where torch orders NaN above +inf: floats are selected
by a key that places -inf, the finite values, +inf and NaN in that order.
"""

from __future__ import annotations

import sys

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ...dtypes import to_torch_dtype
from ..kit import arg_tensor, static_dim
from ..registry import lowering
from ..scalars import as_tensor, promote
from ..shapes import along, normalize_dim, positions, static_size

aten = torch.ops.aten


# Keys of float32, bfloat16 and float16 values, widened to float64: above
# the largest finite value of each (float32's, 3.4e38), +inf and then NaN.
_WIDE_INF_KEY = 3.5e38
_WIDE_NAN_KEY = 3.6e38
# Keys of float64 values: finite values halved (exact but for subnormals,
# where two neighbours may tie), +inf and NaN in the range freed above them.
_NARROW_INF_KEY = 0.75 * sys.float_info.max
_NARROW_NAN_KEY = sys.float_info.max


def _ordering_key(x: TensorValue) -> TensorValue:
    """A float64 key of float ``x`` ordering -inf < finite < +inf < NaN."""
    if x.dtype == DType.float64:
        finite = ops.mul(x, as_tensor(0.5, x.dtype))
        inf, nan = _NARROW_INF_KEY, _NARROW_NAN_KEY
    else:
        finite = ops.cast(x, DType.float64)
        inf, nan = _WIDE_INF_KEY, _WIDE_NAN_KEY
    wide = DType.float64
    signed_inf = ops.where(
        ops.greater(x, as_tensor(0, x.dtype)),
        as_tensor(inf, wide),
        as_tensor(-inf, wide),
    )
    key = ops.where(ops.is_inf(x), signed_inf, finite)
    return ops.where(ops.is_nan(x), as_tensor(nan, wide), key)


# A stable sort orders equal values by position: each key moves by its
# position times a step too small to reach the next distinct value. A float
# key (float32 or narrower, in float64) has 29 bits to spare: steps of 2^-50
# of its size (2^-180 at zero) move a row of 2^24 positions by less than the
# gap to a neighbouring float32. Integers of 32 bits or fewer take steps of
# 2^-22, 2^22 positions a row. Wider values leave no room (see _stable_sort).
_FLOAT_STEP, _ZERO_STEP, STABLE_FLOAT_ROW = 2.0**-50, 2.0**-180, 1 << 24
_INT_STEP, STABLE_INT_ROW = 2.0**-22, 1 << 22
_STABLE_INTS = (DType.bool, DType.int8, DType.uint8, DType.int16, DType.uint16)


def _stable_key(moved: TensorValue, descending: bool) -> TensorValue:
    """A float64 key of ``moved`` along its last axis with no two equal:
    ties are broken by position, first first in either direction."""
    wide = DType.float64
    last = moved.rank - 1
    position = ops.cast(along(positions(moved, last), last, moved.rank), wide)
    if moved.dtype.is_float():
        key = _ordering_key(moved)
        step = ops.max(
            ops.mul(ops.abs(key), as_tensor(_FLOAT_STEP, wide)),
            as_tensor(_ZERO_STEP, wide),
        )
    else:
        key = ops.cast(moved, wide)
        step = as_tensor(_INT_STEP, wide)
    offset = ops.mul(position, step)
    return ops.sub(key, offset) if descending else ops.add(key, offset)


def _select(
    x: TensorValue, k: int, dim: int, largest: bool, stable: bool = False
) -> tuple[TensorValue, TensorValue]:
    if x.rank == 0:
        return x, ops.constant(0, DType.int64, device=x.device)
    axis = normalize_dim(dim, x.rank)
    last = x.rank - 1
    moved = x if axis == last else ops.transpose(x, axis, last)
    select = ops.top_k if largest else ops.bottom_k
    if stable or moved.dtype.is_float():
        key = _stable_key(moved, largest) if stable else _ordering_key(moved)
        _, indices = select(key, k, axis=-1)
        values = ops.gather_nd(moved, ops.unsqueeze(indices, -1), batch_dims=last)
    else:
        values, indices = select(moved, k, axis=-1)
    if axis != last:
        values = ops.transpose(values, axis, last)
        indices = ops.transpose(indices, axis, last)
    return values, indices


# The dim sort and argsort take second, topk third.
_static_sorted_dim = static_dim(1, -1)
_static_topk_dim = static_dim(2, -1)


def _static_topk(node: torch.fx.Node) -> str | None:
    """Along a dim of static size, keeping a count known at compile time
    (MAX's top_k takes a Python int)."""
    k = node.args[1] if len(node.args) > 1 else node.kwargs.get("k")
    if isinstance(k, torch.fx.Node):
        meta = k.meta.get("val")
        if not isinstance(meta, int) and not meta.node.expr.is_number:
            return "topk with k known only at run time"
    return _static_topk_dim(node)


@lowering(aten.sort.default, supports=_static_sorted_dim)
def sort(
    self: TensorValue, dim: int = -1, descending: bool = False
) -> tuple[TensorValue, TensorValue]:
    """sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    if self.rank == 0:
        return _select(self, 1, dim, True)
    size = static_size(self.shape[normalize_dim(dim, self.rank)])
    assert size is not None  # _static_sorted_dim
    return _select(self, size, dim, descending)


@lowering(aten.topk.default, supports=_static_topk)
def topk(
    self: TensorValue,
    k: int,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,
) -> tuple[TensorValue, TensorValue]:
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""
    return _select(self, k, dim, largest)


def _stable_sort(node: torch.fx.Node) -> str | None:
    """A sorted dim of static size; a stable sort of floats of 32 bits or
    fewer along at most 2^24 positions, or of integers of 32 bits or fewer
    along at most 2^22 (room in a float64 key for the position)."""
    reason = _static_sorted_dim(node)
    meta = arg_tensor(node, 0)
    if reason is not None or meta.dim() == 0 or not node.kwargs.get("stable"):
        return reason
    size = meta.shape[normalize_dim(node.kwargs.get("dim", -1), meta.dim())]
    if meta.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return None if size <= STABLE_FLOAT_ROW else "a stable sort of a long row"
    if meta.dtype in (torch.int32, *map(to_torch_dtype, _STABLE_INTS)):
        return None if size <= STABLE_INT_ROW else "a stable sort of a long row"
    return f"a stable sort of {meta.dtype} (no room in the key for the position)"


@lowering(aten.sort.stable, supports=_stable_sort)
def sort_stable(
    self: TensorValue,
    *,
    stable: bool | None = None,
    dim: int = -1,
    descending: bool = False,
) -> tuple[TensorValue, TensorValue]:
    """sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    if self.rank == 0:
        return _select(self, 1, dim, True)
    size = static_size(self.shape[normalize_dim(dim, self.rank)])
    assert size is not None  # _stable_sort
    return _select(self, size, dim, descending, stable=bool(stable))


def _no_sorter(node: torch.fx.Node) -> str | None:
    """Without a sorter (the sequence itself sorted)."""
    if node.kwargs.get("sorter") is not None:
        return "searchsorted with a sorter"
    return None


@lowering(aten.searchsorted.Tensor, aten.searchsorted.Scalar, supports=_no_sorter)
def searchsorted(
    sorted_sequence: TensorValue,
    self: TensorValue | int | float,
    *,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: TensorValue | None = None,
) -> TensorValue:
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor
    searchsorted.Scalar(Tensor sorted_sequence, Scalar self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor
    """
    sequence, values = promote(sorted_sequence, self)
    # Every value against every entry of its row: the count of entries
    # torch's binary search passes over, !(entry >= value) (or > for the
    # right side), so a NaN value lands past the end, as torch's does.
    if sorted_sequence.rank == 1:
        sequence = ops.reshape(sequence, [1] * values.rank + [sequence.shape[0]])
    else:
        sequence = ops.unsqueeze(sequence, -2)
    values = ops.unsqueeze(values, -1)
    past = ops.greater if right or side == "right" else ops.greater_equal
    before = ops.cast(ops.logical_not(past(sequence, values)), DType.int64)
    count = ops.squeeze(ops.sum(before, -1), -1)
    return ops.cast(count, DType.int32 if out_int32 else DType.int64)
