"""Writes into a view of a tensor, as functionalization leaves them: the
result of writing ``src`` into one index (select_scatter) or one slice
(slice_scatter) of ``self``; the gradients of indexing and slicing."""

from __future__ import annotations

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..index_origin import runtime_int
from ..kit import arg_tensor, node_arg
from ..registry import Strategy, lowering, lowering_strategies
from ..scalars import as_tensor
from ..shapes import (
    along,
    index_along,
    normalize_dim,
    positions,
    size_value,
    static_size,
)

aten = torch.ops.aten


@lowering(aten.select_scatter.default)
def select_scatter(
    self: TensorValue, src: TensorValue, dim: int, index: int
) -> TensorValue:
    """select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor"""
    axis = normalize_dim(dim, self.rank)
    pos = positions(self, axis)
    target = size_value(self.shape[axis], index) if index < 0 else index
    target = as_tensor(target, DType.int64)
    hit = along(ops.equal(pos, target), axis, self.rank)
    update = ops.unsqueeze(as_tensor(src, self.dtype), axis)
    return ops.where(hit, update, self)


def _static_diagonal_plane(node: torch.fx.Node) -> str | None:
    """The two dims of the diagonal of static sizes."""
    self = arg_tensor(node, 0)
    dims = (node_arg(node, 3, "dim1", 0), node_arg(node, 4, "dim2", 1))
    if not all(isinstance(self.shape[d], int) for d in dims):
        return "diagonal_scatter across dims of symbolic size"
    return None


@lowering(aten.diagonal_scatter.default, supports=_static_diagonal_plane)
def diagonal_scatter(
    self: TensorValue, src: TensorValue, offset: int = 0, dim1: int = 0, dim2: int = 1
) -> TensorValue:
    """diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor"""
    # torch's own decomposition writes through a view (prims.copy_to), which
    # AOTAutograd refuses in a functional graph: diagonals' gradients
    # (diagonal_backward) failed to compile. Here a select on the plane.
    axes = [normalize_dim(d, self.rank) for d in (dim1, dim2)]
    rows, cols = (int(self.shape[a]) for a in axes)
    first_row, first_col = max(0, -offset), max(0, offset)
    length = max(0, min(rows - first_row, cols - first_col))
    if length == 0:
        return self
    others = [a for a in range(self.rank) if a not in axes]
    # The plane last, as src has the diagonal last after the other dims.
    plane_last = ops.permute(self, [*others, *axes])
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    hit = ops.constant(j - i == offset, DType.bool, device=self.device)
    # Each (i, j) of the plane reads the diagonal's element i - first_row
    # (where it is on the diagonal; clamped elsewhere, and not selected).
    index = np.clip(i - first_row, 0, length - 1).reshape(-1)
    spread = ops.gather(
        ops.cast(src, self.dtype),
        ops.constant(index, DType.int64, device=self.device),
        axis=-1,
    )
    spread = ops.reshape(spread, [*plane_last.shape[:-2], rows, cols])
    out = ops.where(hit, spread, plane_last)
    back = np.argsort([*others, *axes]).tolist()
    return ops.permute(out, back)


def _slice_bounds(
    size: int | None, start: int | None, end: int | None
) -> tuple[int, int]:
    start = 0 if start is None else start
    end = 2**62 if end is None else end
    if size is not None:
        # Python slicing: negatives count from the end, bounds clamp.
        start = min(max(start + size if start < 0 else start, 0), size)
        end = min(max(end + size if end < 0 else end, 0), size)
    return start, min(end, 2**62)


def _nonnegative_bounds(node: torch.fx.Node) -> str | None:
    """On a symbolic dim, only non-negative static bounds."""
    meta = arg_tensor(node, 0)
    size = meta.shape[node_arg(node, 2, "dim", 0)]
    start, end = node_arg(node, 3, "start", None), node_arg(node, 4, "end", None)
    bounds = [a for a in (start, end) if a is not None]
    if not isinstance(size, int) and any(
        not isinstance(b, int) or b < 0 for b in bounds
    ):
        return "slice_scatter with negative or symbolic bounds on a symbolic dim"
    return None


def _slice_scatter_by_gather(
    self: TensorValue,
    src: TensorValue,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> TensorValue:
    """slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor"""
    axis = normalize_dim(dim, self.rank)
    first, stop = _slice_bounds(static_size(self.shape[axis]), start, end)
    pos = positions(self, axis)
    offset = ops.sub(pos, as_tensor(first, DType.int64))
    # Read at run time: MAX's integer division tests its divisor's sign,
    # which on a constant it would fold at compile time (a kernel compile).
    step_t = runtime_int(step, self.device)
    inside = ops.logical_and(
        ops.greater_equal(offset, as_tensor(0, DType.int64)),
        ops.greater(as_tensor(stop, DType.int64), pos),
    )
    if step != 1:
        on_step = ops.equal(ops.mod(offset, step_t), as_tensor(0, DType.int64))
        inside = ops.logical_and(inside, on_step)
    # Where each position of self reads src from (clamped where unused).
    source = offset if step == 1 else ops.floor_div(offset, step_t)
    source = ops.min(
        ops.max(source, as_tensor(0, DType.int64)),
        as_tensor(size_value(src.shape[axis], -1), DType.int64),
    )
    picked = ops.gather(as_tensor(src, self.dtype), source, axis=axis)
    return ops.where(along(inside, axis, self.rank), picked, self)


def _static_slice(node: torch.fx.Node) -> tuple[int, int, int, int] | None:
    """The written slice's (size, first, count, step) when all are static."""
    meta = arg_tensor(node, 0)
    dim = normalize_dim(node_arg(node, 2, "dim", 0), meta.dim())
    size, step = meta.shape[dim], node_arg(node, 5, "step", 1)
    start, end = node_arg(node, 3, "start", None), node_arg(node, 4, "end", None)
    given = [v for v in (size, step, start, end) if v is not None]
    if not all(isinstance(v, int) for v in given):
        return None
    first, stop = _slice_bounds(size, start, end)
    return size, first, len(range(first, stop, step)), step


def static_slice_or_whole_groups(node: torch.fx.Node) -> str | None:
    """Static bounds and size, and a step of 1 or one element of every step-long group (`x[..., 1::2]` of an even size)."""
    found = _static_slice(node)
    if found is None:
        return "symbolic bounds, step or size"
    size, first, count, step = found
    if step != 1 and (size % step or first >= step or count != size // step):
        return "a strided slice that misses some groups"
    return None


def _spliced(
    x: TensorValue, src: TensorValue, axis: int, first: int, count: int
) -> TensorValue:
    """``x`` with positions first..first+count along ``axis`` replaced by ``src``."""
    size = int(x.shape[axis])

    pieces = [
        index_along(x, axis, slice(0, first)),
        src,
        index_along(x, axis, slice(first + count, size)),
    ]
    kept = [p for p in pieces if static_size(p.shape[axis]) != 0]
    if len(kept) == 1:
        return kept[0]
    return ops.concat(kept, axis=axis)


def _slice_scatter_by_concatenation(
    self: TensorValue,
    src: TensorValue,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> TensorValue:
    """slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor"""
    # A copy of three pieces: MAX compiles a concatenation in about half the
    # time of the gather and select above, which each slice's gradient
    # (rotate_half, a scan over a sequence) would otherwise cost
    # (benchmarks.compile_kernels, slices-concat against slices-gather).
    axis = normalize_dim(dim, self.rank)
    size = int(self.shape[axis])
    first, stop = _slice_bounds(size, start, end)
    count = len(range(first, stop, step))
    src = as_tensor(src, self.dtype)
    if step == 1:
        return _spliced(self, src, axis, first, count)
    # Every group of ``step`` positions gives one element: the groups as a
    # dim of their own, and in each the one position written.
    shape = list(self.shape)
    grouped = [*shape[:axis], count, step, *shape[axis + 1 :]]
    src = ops.reshape(src, [*shape[:axis], count, 1, *shape[axis + 1 :]])
    out = _spliced(ops.reshape(self, grouped), src, axis + 1, first, 1)
    return ops.reshape(out, shape)


slice_scatter = lowering_strategies(
    aten.slice_scatter.default,
    supports=_nonnegative_bounds,
    candidates=[
        Strategy(
            "concatenation",
            _slice_scatter_by_concatenation,
            static_slice_or_whole_groups,
        ),
        Strategy("gather", _slice_scatter_by_gather),
    ],
)
