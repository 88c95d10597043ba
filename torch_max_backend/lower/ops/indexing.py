"""Gathers by index: embedding, index_select, ..."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.graph import Dim, StaticDim, TensorValue, ops

from ..checks import in_range, unless_refused
from ..context import current, known_arg_bounds
from ..kit import node_arg, tensor_meta
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import broadcast_shape, normalize_dim, static_size

aten = torch.ops.aten


@lowering(aten.embedding.default)
def embedding(
    weight: TensorValue,
    indices: TensorValue,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> TensorValue:
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor"""
    indices, _ = in_range(
        indices,
        weight.shape[0],
        0,
        "IndexError",
        wraps=False,
        known=known_arg_bounds(1, "indices"),
    )
    if indices.rank == 0:
        # MAX fails to compile a gather by a 0-d index: gather one row.
        row = ops.gather(weight, ops.reshape(indices, [1]), axis=0)
        return ops.reshape(row, list(weight.shape[1:]))
    return ops.gather(weight, indices, axis=0)


@lowering(aten.index_select.default)
def index_select(self: TensorValue, dim: int, index: TensorValue) -> TensorValue:
    """index_select(Tensor self, int dim, Tensor index) -> Tensor"""
    if self.rank == 0:
        # A 0-d tensor can only be indexed at 0, and the result stays 0-d.
        _ = in_range(index, 1, 0, "IndexError", wraps=False)
        return self
    axis = normalize_dim(dim, self.rank)
    index, _ = in_range(
        index,
        self.shape[axis],
        axis,
        "IndexError",
        wraps=False,
        known=known_arg_bounds(2, "index"),
    )
    return ops.gather(self, index, axis=axis)


def _tensor_indices_only(node: torch.fx.Node) -> str | None:
    """Integer index tensors only (boolean masks give data-dependent shapes)."""
    for index in node_arg(node, 1, "indices", ()):
        meta = tensor_meta(index)
        if meta is not None and meta.dtype in (torch.bool, torch.uint8):
            return "boolean mask indices (data-dependent output shape)"
    return None


def _checked(
    index: TensorValue, size: Dim, d: int
) -> tuple[TensorValue, TensorValue | None]:
    """Index tensor ``d`` of the node's list checked to address one of
    ``size`` positions, negative ones counting from the end (``in_range``).
    One FX value indexing several times (interpolation's four source rows
    and columns, each read by four of bicubic's gathers) is checked once:
    each check is a reduction kernel for MAX to compile."""
    listed = node_arg(current().node, 1, "indices", ())
    source = listed[d] if d < len(listed) else None
    key = ("index", source, str(size)) if isinstance(source, torch.fx.Node) else None
    known = known_arg_bounds(1, "indices", d)
    return in_range(index, size, d, "IndexError", wraps=True, key=key, known=known)


class _AdvancedIndex:
    """torch's advanced indexing by tensors, as MAX gather_nd/scatter_nd.

    The indexed dims are moved to the front of ``self`` ("moved" layout) and
    the index tensors, broadcast together to shape B, stacked into one
    B + [k] tensor of index vectors.
    """

    def __init__(self, x: TensorValue, indices: Sequence[TensorValue | None]) -> None:
        self.dims = [d for d, i in enumerate(indices) if i is not None]
        self.rest = [d for d in range(x.rank) if d not in self.dims]
        tensors = [indices[d] for d in self.dims]
        self.batch = broadcast_shape(tensors)
        wrapped = []
        # Whether a check refused the call (an index out of range).
        self.refused: TensorValue | None = None
        for d, t in zip(self.dims, tensors, strict=True):
            # Negative indices count from the end, as in torch.
            t, refused = _checked(t, x.shape[d], d)
            if refused is not None:
                self.refused = (
                    refused
                    if self.refused is None
                    else ops.logical_or(self.refused, refused)
                )
            wrapped.append(ops.broadcast_to(t, self.batch))
        self.vectors = ops.stack(wrapped, axis=-1)
        self.order = self.dims + self.rest
        self.moved = (
            x if self.order == list(range(x.rank)) else ops.permute(x, self.order)
        )
        # torch keeps the B dims in place when the indexed dims are adjacent,
        # and puts them first otherwise.
        first = self.dims[0]
        adjacent = self.dims == list(range(first, first + len(self.dims)))
        self.lead = first if adjacent else 0

    def result_order(self, rank: int) -> list[int]:
        """Permutation from the moved layout's result to torch's result layout."""
        k = len(self.batch)
        lead = self.lead
        return list(range(k, k + lead)) + list(range(k)) + list(range(k + lead, rank))

    def restore(self, moved: TensorValue) -> TensorValue:
        if self.order == list(range(moved.rank)):
            return moved
        inverse = [self.order.index(d) for d in range(moved.rank)]
        return ops.permute(moved, inverse)


def _gathers_dim_by_dim(
    x: TensorValue, indices: Sequence[TensorValue | None]
) -> list[tuple[int, TensorValue]] | None:
    """``x[indices]`` as (dim, index) gathers one dim at a time, when it is
    one: a single index tensor, or an outer product of one index per dim (the
    indexed dims adjacent, and the j-th of k index tensors varying only along
    axis j of their k-dim broadcast shape, as in ``x[..., rows[:, None],
    cols]`` of interpolation, crops and patches). MAX compiles and runs these
    far faster than one gather_nd by the broadcast index vectors (which the
    other forms take); None for those."""
    dims = [d for d, i in enumerate(indices) if i is not None]
    tensors = [indices[d] for d in dims]
    k = len(dims)
    if k == 1 and tensors[0].rank > 0:
        # One index tensor, of any rank: MAX's gather places its dims where
        # the indexed dim was, as torch does.
        return [(dims[0], tensors[0])]
    if (
        not dims
        or dims != list(range(dims[0], dims[0] + k))
        or max(t.rank for t in tensors) > k
    ):
        return None
    batch = broadcast_shape(tensors)
    pairs = []
    for j, (d, t) in enumerate(zip(dims, tensors, strict=True)):
        shape = [StaticDim(1)] * (k - t.rank) + list(t.shape)
        if shape[j] != batch[j] or any(
            static_size(size) != 1 for m, size in enumerate(shape) if m != j
        ):
            return None
        pairs.append((d, ops.reshape(t, [shape[j]])))
    return pairs


@lowering(aten.index.Tensor, supports=_tensor_indices_only)
def index(self: TensorValue, indices: Sequence[TensorValue | None]) -> TensorValue:
    """index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"""
    gathers = _gathers_dim_by_dim(self, indices)
    if gathers is not None:
        result = self
        for d, t in gathers:
            t, _ = _checked(t, self.shape[d], d)
            result = ops.gather(result, t, axis=d)
        return result
    plan = _AdvancedIndex(self, indices)
    gathered = ops.gather_nd(plan.moved, plan.vectors)
    if plan.lead == 0:
        return gathered
    return ops.permute(gathered, plan.result_order(gathered.rank))


@lowering(aten.index_put.default, supports=_tensor_indices_only)
def index_put(
    self: TensorValue,
    indices: Sequence[TensorValue | None],
    values: TensorValue,
    accumulate: bool = False,
) -> TensorValue:
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor"""
    plan = _AdvancedIndex(self, indices)
    # values broadcast to the shape index() would return, then into the
    # moved layout (B first) that scatter_nd expects.
    rest_shape = [self.shape[d] for d in plan.rest]
    result_shape = [*rest_shape[: plan.lead], *plan.batch, *rest_shape[plan.lead :]]
    updates = ops.broadcast_to(as_tensor(values, self.dtype), result_shape)
    if plan.lead:
        order = plan.result_order(len(result_shape))
        updates = ops.permute(updates, [order.index(i) for i in range(len(order))])
    scatter = ops.scatter_nd_add if accumulate else ops.scatter_nd
    written = plan.restore(scatter(plan.moved, updates, plan.vectors))
    return unless_refused(plan.refused, written, self)
