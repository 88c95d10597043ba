"""Embedding gradients and embedding bags, built on MAX's scatter-reductions.

Rows of a gradient land in the rows of the table with ``scatter_nd_add``
(duplicate indices accumulate); bags are segments of the index list,
numbered per index by ``_bag_of_each_index`` as torch's ``offset2bag`` is.
The bag ops follow torch's CPU kernels, including the shapes and values of
their auxiliary outputs, which the backward reads.
"""

from __future__ import annotations

import torch
from max.dtype import DType
from max.graph import Dim, TensorValue, ops

from ...dtypes import accumulation_dtype, to_max_dtype
from ..checks import in_range
from ..context import current, known_arg_bounds
from ..kit import fake_tensor, has_no_elements, node_arg, schema_args
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import positions, static_size

aten = torch.ops.aten

# torch's embedding-bag modes.
MODE_SUM, MODE_MEAN, MODE_MAX = 0, 1, 2


def _filled(value: int | float, dtype: DType, shape: list[int | Dim]) -> TensorValue:
    return ops.broadcast_to(as_tensor(value, dtype), shape)


def _size(x: TensorValue, axis: int) -> TensorValue:
    """``x.shape[axis]`` as a rank-0 int64 value, static or symbolic."""
    n = static_size(x.shape[axis])
    if n is not None:
        return as_tensor(n, DType.int64)
    return ops.cast(ops.shape_to_tensor([x.shape[axis]]).reshape([]), DType.int64)


def _column(x: TensorValue) -> TensorValue:
    """A 1-d tensor as a column: index vectors for scatter_nd, or a per-row factor."""
    return ops.reshape(x, [-1, 1])


def _meta() -> list[torch.Tensor]:
    meta = current().out_meta
    assert isinstance(meta, (list, tuple))
    return list(meta)


# -- embedding -------------------------------------------------------------------


def _dense_embedding_grad(node: torch.fx.Node) -> str | None:
    """A padding_idx known at compile time."""
    padding_idx = node_arg(node, 3, "padding_idx", None)
    if not isinstance(padding_idx, int):
        return "embedding backward with a symbolic padding_idx"
    return None


@lowering(aten.embedding_dense_backward.default, supports=_dense_embedding_grad)
def embedding_dense_backward(
    grad_output: TensorValue,
    indices: TensorValue,
    num_weights: int | Dim,
    padding_idx: int,
    scale_grad_by_freq: bool,
) -> TensorValue:
    """embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) -> Tensor"""
    dim = grad_output.shape[-1]
    rows = ops.reshape(grad_output, [-1, dim])
    where = _column(indices)
    if scale_grad_by_freq:
        # Each row divided by how often its index occurs in the whole batch
        # (padding included, as torch counts it).
        ones = _filled(1, DType.int64, [rows.shape[0]])
        counts = ops.scatter_nd_add(_filled(0, DType.int64, [num_weights]), ones, where)
        freq = ops.gather(counts, ops.reshape(indices, [-1]), axis=0)
        rows = ops.div(rows, _column(ops.cast(freq, rows.dtype)))
    # The padding row gets no gradient (torch compares even when padding_idx
    # is -1: valid indices never are).
    keep = ops.not_equal(where, as_tensor(padding_idx, indices.dtype))
    rows = ops.where(keep, rows, as_tensor(0, rows.dtype))
    return ops.scatter_nd_add(
        _filled(0, grad_output.dtype, [num_weights, dim]), rows, where
    )


# -- embedding bags ---------------------------------------------------------------


def _bag_of_each_index(
    indices: TensorValue, offsets: TensorValue, drop_last: bool
) -> TensorValue:
    """torch's offset2bag: for each index, the number of bag starts at or
    before its position, minus one (int64).

    Starts at or past the end of ``indices`` (empty trailing bags) start
    nothing; with ``drop_last`` (``include_last_offset``) the last offset is
    ignored, as torch's forward ignores it.
    """
    offs = ops.cast(offsets, DType.int64)
    length = _size(indices, 0)
    keep = ops.greater(length, offs)
    if drop_last:
        last = ops.sub(_size(offsets, 0), as_tensor(1, DType.int64))
        keep = ops.logical_and(keep, ops.greater(last, positions(offs, 0)))
    marks = ops.cast(keep, DType.int64)
    # Dropped starts add 0 at position 0: in bounds, and no change.
    target = ops.where(keep, offs, as_tensor(0, DType.int64))
    starts = ops.scatter_nd_add(
        _filled(0, DType.int64, [indices.shape[0]]), marks, _column(target)
    )
    return ops.sub(ops.cumsum(starts, axis=0), as_tensor(1, DType.int64))


def _num_bags(offsets: TensorValue, include_last_offset: bool) -> int | Dim:
    n = offsets.shape[0]
    return n - 1 if include_last_offset else n


def _bag_max(
    rows: TensorValue,
    indices: TensorValue,
    bag: TensorValue,
    keep: TensorValue,
    counts: TensorValue,
    num_bags: int | Dim,
) -> tuple[TensorValue, TensorValue]:
    """Per-bag, per-feature maximum and the table row it came from.

    Like torch, the first index in a bag reaching the maximum wins; empty
    bags give 0 and row 0.
    """
    dim = rows.shape[1]
    dtype = rows.dtype
    lowest = as_tensor(float("-inf"), dtype)
    candidates = ops.where(_column(keep), rows, lowest)
    best = ops.scatter_nd_max(
        _filled(float("-inf"), dtype, [num_bags, dim]), candidates, _column(bag)
    )
    nonempty = _column(ops.greater(counts, as_tensor(0, counts.dtype)))
    # The first position whose row equals its bag's maximum, per feature.
    hit = ops.logical_and(ops.equal(rows, ops.gather(best, bag, axis=0)), _column(keep))
    length = _size(indices, 0)
    position = ops.broadcast_to(_column(positions(indices, 0)), list(rows.shape))
    first = ops.scatter_nd_min(
        ops.broadcast_to(length, [num_bags, dim]),
        ops.where(hit, position, length),
        _column(bag),
    )
    # Empty bags found no position; any in-range one will do before masking.
    first = ops.min(first, ops.sub(length, as_tensor(1, DType.int64)))
    word = ops.gather(ops.cast(indices, DType.int64), first, axis=0)
    zero = as_tensor(0, DType.int64)
    return ops.where(nonempty, best, as_tensor(0, dtype)), ops.where(
        nonempty, word, zero
    )


def _bag_supported(node: torch.fx.Node) -> str | None:
    """Flat (1-d) indices; max bags of at least one index; inference-only mean/max bags without include_last_offset."""
    args = schema_args(node)
    mode = args.get("mode", MODE_SUM)
    indices = fake_tensor(args["indices"])
    if indices.dim() != 1:
        return "embedding bag with 2-d indices (torch.nn.functional flattens them)"
    if mode == MODE_MAX and has_no_elements(indices):
        return "max embedding bag of no indices"
    if (
        node.target is aten._embedding_bag_forward_only.default
        and args.get("include_last_offset", False)
        and mode != MODE_SUM
    ):
        # torch's meta and CPU kernel disagree on bag_size's length here.
        return "inference-only mean/max embedding bag with include_last_offset"
    return None


@lowering(
    aten._embedding_bag.default,
    aten._embedding_bag_forward_only.default,
    supports=_bag_supported,
)
def embedding_bag(
    weight: TensorValue,
    indices: TensorValue,
    offsets: TensorValue,
    scale_grad_by_freq: bool = False,
    mode: int = 0,
    sparse: bool = False,
    per_sample_weights: TensorValue | None = None,
    include_last_offset: bool = False,
    padding_idx: int = -1,
) -> tuple[TensorValue, TensorValue, TensorValue, TensorValue]:
    """_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)
    _embedding_bag_forward_only(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)
    """
    # Returns (output, offset2bag, bag_size, max_indices), shaped and typed
    # as torch's CPU kernel makes them.
    meta = _meta()
    index_dtype = to_max_dtype(meta[1].dtype)
    num_bags = _num_bags(offsets, include_last_offset)
    bag = _bag_of_each_index(indices, offsets, include_last_offset)
    known = known_arg_bounds(1, "indices")
    rows_of, _ = in_range(
        indices, weight.shape[0], 0, "RuntimeError", wraps=False, known=known
    )
    rows = ops.gather(weight, rows_of, axis=0)
    keep = ops.not_equal(indices, as_tensor(padding_idx, indices.dtype))
    # Indices per bag, padding excluded.
    counts = ops.scatter_nd_add(
        _filled(0, DType.int64, [num_bags]), ops.cast(keep, DType.int64), _column(bag)
    )
    if mode == MODE_MAX:
        output, max_indices = _bag_max(rows, indices, bag, keep, counts, num_bags)
        max_indices = ops.cast(max_indices, index_dtype)
    else:
        # Half-precision rows are added in float32 and rounded once, as
        # torch's kernel does (in float16, 15 ulps off a 500-row bag's sum).
        total = accumulation_dtype(weight.dtype)
        rows = as_tensor(rows, total)
        if per_sample_weights is not None:
            rows = ops.mul(rows, _column(as_tensor(per_sample_weights, total)))
        rows = ops.where(_column(keep), rows, as_tensor(0, total))
        output = ops.scatter_nd_add(
            _filled(0, total, [num_bags, weight.shape[1]]), rows, _column(bag)
        )
        if mode == MODE_MEAN:
            divisor = ops.max(counts, as_tensor(1, DType.int64))
            output = ops.div(output, _column(ops.cast(divisor, output.dtype)))
        output = as_tensor(output, weight.dtype)
    # torch zeroes bag_size in sum mode, and copies it into max_indices
    # outside max mode. The forward-only op's meta sizes bag_size by the
    # offsets (one more than the bags with include_last_offset, allowed
    # only in sum mode).
    if mode == MODE_SUM:
        forward_only = current().node.target is aten._embedding_bag_forward_only.default
        length = offsets.shape[0] if forward_only else num_bags
        bag_size = _filled(0, index_dtype, [length])
        max_indices = _filled(0, index_dtype, [num_bags])
    else:
        bag_size = ops.cast(counts, index_dtype)
        if mode == MODE_MEAN:
            max_indices = bag_size
    # The fast sum path of torch's kernel leaves offset2bag empty.
    if has_no_elements(meta[1]):
        offset2bag = _filled(0, index_dtype, [0])
    else:
        offset2bag = ops.cast(bag, index_dtype)
    return output, offset2bag, bag_size, max_indices


def _bag_grad_supported(node: torch.fx.Node) -> str | None:
    """Dense gradients of flat (1-d) indices, without scale_grad_by_freq."""
    args = schema_args(node)
    if args.get("sparse", False):
        return "embedding bag with sparse gradients"
    if args["scale_grad_by_freq"]:
        # torch's CPU kernel divides by the count of the wrong index (it
        # indexes the sorted indices by unique-group number): no consistent
        # result to reproduce.
        return "embedding bag backward with scale_grad_by_freq"
    if fake_tensor(args["indices"]).dim() != 1:
        return "embedding bag backward with 2-d indices"
    return None


def _bag_rows(
    grad: TensorValue,
    indices: TensorValue,
    offsets: TensorValue,
    offset2bag: TensorValue,
) -> tuple[TensorValue, TensorValue]:
    """The bag of each index, and the grad row of that bag, per index."""
    if static_size(offset2bag.shape[0]) == 0 and static_size(indices.shape[0]) != 0:
        # The forward's fast path saved no offset2bag: torch's backward
        # rebuilds it from every offset.
        bag = _bag_of_each_index(indices, offsets, drop_last=False)
    else:
        bag = ops.cast(offset2bag, DType.int64)
    return bag, ops.gather(grad, bag, axis=0)


@lowering(aten._embedding_bag_backward.default, supports=_bag_grad_supported)
def embedding_bag_backward(
    grad: TensorValue,
    indices: TensorValue,
    offsets: TensorValue,
    offset2bag: TensorValue,
    bag_size: TensorValue,
    maximum_indices: TensorValue,
    num_weights: int | Dim,
    scale_grad_by_freq: bool,
    mode: int,
    sparse: bool,
    per_sample_weights: TensorValue | None,
    padding_idx: int = -1,
) -> TensorValue:
    """_embedding_bag_backward(Tensor grad, Tensor indices, Tensor offsets, Tensor offset2bag, Tensor bag_size, Tensor maximum_indices, SymInt num_weights, bool scale_grad_by_freq, int mode, bool sparse, Tensor? per_sample_weights, int padding_idx=-1) -> Tensor"""
    dim = grad.shape[1]
    table = _filled(0, grad.dtype, [num_weights, dim])
    if mode == MODE_MAX:
        # Each nonempty bag's grad goes, feature by feature, to the row that
        # gave the maximum: index vectors (row, feature).
        nonempty = _column(ops.not_equal(bag_size, as_tensor(0, bag_size.dtype)))
        updates = ops.where(nonempty, grad, as_tensor(0, grad.dtype))
        feature = ops.broadcast_to(
            ops.reshape(positions(grad, 1), [1, -1]), list(grad.shape)
        )
        vectors = ops.stack([ops.cast(maximum_indices, DType.int64), feature], axis=-1)
        return ops.scatter_nd_add(table, updates, vectors)
    bag, rows = _bag_rows(grad, indices, offsets, offset2bag)
    if per_sample_weights is not None:
        rows = ops.mul(rows, _column(per_sample_weights))
    if mode == MODE_MEAN:
        size = ops.gather(bag_size, bag, axis=0)
        size = ops.where(
            ops.equal(size, as_tensor(0, size.dtype)), as_tensor(1, size.dtype), size
        )
        rows = ops.div(rows, _column(ops.cast(size, rows.dtype)))
    keep = ops.not_equal(indices, as_tensor(padding_idx, indices.dtype))
    rows = ops.where(_column(keep), rows, as_tensor(0, rows.dtype))
    return ops.scatter_nd_add(table, rows, _column(indices))


def _sum_mode_only(node: torch.fx.Node) -> str | None:
    """Sum mode, the only one torch allows per_sample_weights in."""
    mode = node_arg(node, 5, "mode", None)
    if mode != MODE_SUM:
        return "per_sample_weights outside sum mode (torch raises)"
    return None


@lowering(
    aten._embedding_bag_per_sample_weights_backward.default, supports=_sum_mode_only
)
def embedding_bag_per_sample_weights_backward(
    grad: TensorValue,
    weight: TensorValue,
    indices: TensorValue,
    offsets: TensorValue,
    offset2bag: TensorValue,
    mode: int,
    padding_idx: int = -1,
) -> TensorValue:
    """_embedding_bag_per_sample_weights_backward(Tensor grad, Tensor weight, Tensor indices, Tensor offsets, Tensor offset2bag, int mode, int padding_idx=-1) -> Tensor"""
    # d(output[bag]) / d(weight_i) = table row of index i: a dot product
    # with the bag's grad, 0 for padding.
    _, rows = _bag_rows(grad, indices, offsets, offset2bag)
    dots = ops.sum(ops.mul(rows, ops.gather(weight, indices, axis=0)), -1)
    dots = ops.reshape(dots, [-1])
    keep = ops.not_equal(indices, as_tensor(padding_idx, indices.dtype))
    return ops.where(keep, dots, as_tensor(0, dots.dtype))
