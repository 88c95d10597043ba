"""Sorting and selection: sort, topk.

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

from ..kit import arg_tensor, node_arg
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import normalize_dim, static_size

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


def _select(
    x: TensorValue, k: int, dim: int, largest: bool
) -> tuple[TensorValue, TensorValue]:
    if x.rank == 0:
        return x, ops.constant(0, DType.int64, device=x.device)
    axis = normalize_dim(dim, x.rank)
    last = x.rank - 1
    moved = x if axis == last else ops.transpose(x, axis, last)
    select = ops.top_k if largest else ops.bottom_k
    if moved.dtype.is_float():
        _, indices = select(_ordering_key(moved), k, axis=-1)
        values = ops.gather_nd(moved, ops.unsqueeze(indices, -1), batch_dims=last)
    else:
        values, indices = select(moved, k, axis=-1)
    if axis != last:
        values = ops.transpose(values, axis, last)
        indices = ops.transpose(indices, axis, last)
    return values, indices


def _static_axis(node: torch.fx.Node) -> str | None:
    """The sorted dim has a size known at compile time."""
    meta = arg_tensor(node, 0)
    if meta.dim() == 0:
        return None
    dim = node_arg(node, 1, "dim", -1)
    if node.target is aten.topk.default:
        dim = node_arg(node, 2, "dim", -1)
    if not isinstance(meta.shape[normalize_dim(dim, meta.dim())], int):
        return f"{node.target} along a symbolic dim"
    return None


@lowering(aten.sort.default, supports=_static_axis)
def sort(
    self: TensorValue, dim: int = -1, descending: bool = False
) -> tuple[TensorValue, TensorValue]:
    """sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    if self.rank == 0:
        return _select(self, 1, dim, True)
    size = static_size(self.shape[normalize_dim(dim, self.rank)])
    assert size is not None  # _static_axis
    return _select(self, size, dim, descending)


@lowering(aten.topk.default, supports=_static_axis)
def topk(
    self: TensorValue,
    k: int,
    dim: int = -1,
    largest: bool = True,
    sorted: bool = True,
) -> tuple[TensorValue, TensorValue]:
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"""
    return _select(self, k, dim, largest)
