"""Grouped products: a mixture-of-experts layer's per-expert matmuls as one op.

``offs`` holds the running count of rows that ends each group (the tokens
routed to each expert, sorted by expert). Each group is cut out as a slice
whose size is known only at run time (a fresh MAX dim), so every expert
multiplies exactly its own rows, the work of eager's per-expert loop, with
no read-back of ``offs`` to the host between kernels. Each group's product
is a sum or a matmul by the size it can reach (products.group_product).

Rows after the last group come out as zeros (transformers' fallback writes
zeros; aten's kernel leaves them unwritten). ``offs`` that does not count up
from 0 within the rows raises after the call: eager computes with such
offsets whatever memory holds, or skips rows.
"""

from __future__ import annotations

import numpy as np
import torch
from max.dtype import DType
from max.graph import DeviceRef, Dim, TensorValue, ops

from ..checks import fail_when
from ..kit import arg_meta, node_arg
from ..products import group_contraction, group_product, product
from ..registry import lowering
from ..shapes import fresh_dim, index_along, size_value, static_size

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _on_host(value: int | TensorValue) -> TensorValue:
    """``value`` as an int64 scalar on the host, where MAX takes slice bounds."""
    if isinstance(value, TensorValue):
        return value
    return ops.constant(value, DType.int64, device=DeviceRef.CPU())


def _group_ends(offs: TensorValue, total: Dim) -> list[TensorValue]:
    """Each group's end as an int64 scalar on the host (where MAX takes slice
    bounds), clamped to count up from 0 to ``total`` so that every slice is
    valid; offsets that needed clamping fail the call after it."""
    host = offs if offs.device.is_cpu() else ops.transfer_to(offs, DeviceRef.CPU())
    counts = ops.cast(host, DType.int64)
    groups = int(counts.shape[0])
    cpu = DeviceRef.CPU()
    zero = ops.constant(np.zeros(1, np.int64), DType.int64, device=cpu)
    before = (
        ops.concat([zero, index_along(counts, 0, slice(0, groups - 1))], 0)
        if groups > 1
        else zero
    )
    limit = _on_host(size_value(total))
    fail_when(
        ops.logical_or(ops.greater(before, counts), ops.greater(counts, limit)),
        "RuntimeError",
        f"grouped_mm: offs must count up from 0 to at most {total}, the size "
        "of the grouped dim",
    )
    ends = []
    end = _on_host(0)
    for group in range(groups):
        count = ops.reshape(index_along(counts, 0, slice(group, group + 1)), [])
        end = ops.min(ops.max(count, end), limit)
        ends.append(end)
    return ends


def _slices(
    x: TensorValue, axis: int, ends: list[TensorValue], sizes: list[Dim]
) -> tuple[list[TensorValue], TensorValue]:
    """``x`` cut along ``axis`` into the groups ending at ``ends``, of the
    run-time ``sizes``, and what follows the last group."""
    start = _on_host(0)
    pieces = []
    for end, size in zip(
        [*ends, _on_host(size_value(x.shape[axis]))], sizes, strict=True
    ):
        selector: list[slice | tuple[slice, Dim]] = [slice(None)] * x.rank
        selector[axis] = (slice(start, end), size)
        pieces.append(ops.slice_tensor(x, selector))
        start = end
    return pieces[:-1], pieces[-1]


def _sizes(groups: int) -> list[Dim]:
    """A fresh run-time size for each group and for the rows after them."""
    return [fresh_dim("group") for _ in range(groups + 1)]


def _zeros(rows: TensorValue, width: Dim) -> TensorValue:
    """Zeros [G, width] for ``rows`` [G, K], G known only at run time, made
    from ``rows``' first column without reading its values (a NaN times 0
    is NaN); MAX 26.7's compiler crashes on a constant or a range broadcast
    to a run-time size."""
    column = index_along(rows, 1, slice(0, 1))
    flags = ops.cast(ops.is_nan(column), rows.dtype)
    zero = ops.mul(flags, ops.constant(0, rows.dtype, device=rows.device))
    return ops.broadcast_to(zero, [rows.shape[0], width])


def grouped_rows(x: TensorValue, weight: TensorValue, offs: TensorValue) -> TensorValue:
    """``x`` [S, K]'s rows in groups, each times its own ``weight`` [E, K, N]:
    [S, N], zeros after the last group."""
    total, width = x.shape[0], weight.shape[-1]
    if static_size(x.shape[1]) == 0:
        return ops.broadcast_to(
            ops.constant(0, x.dtype, device=x.device), [total, width]
        )
    ends = _group_ends(offs, total)
    groups, rest = _slices(x, 0, ends, _sizes(len(ends)))
    out = [
        group_product(
            rows,
            ops.squeeze(index_along(weight, 0, slice(e, e + 1)), 0),
            static_size(total),
        )
        for e, rows in enumerate(groups)
    ]
    out.append(_zeros(rest, width))
    return ops.rebind(ops.concat(out, 0), [total, width])


def grouped_contraction(
    a: TensorValue, b: TensorValue, offs: TensorValue
) -> TensorValue:
    """``a`` [M, S] times ``b`` [S, N] summed over each group of S apart:
    [E, M, N], zeros for a group with no rows."""
    total = a.shape[1]
    ends = _group_ends(offs, total)
    sizes = _sizes(len(ends))
    a_groups, _ = _slices(a, 1, ends, sizes)
    b_groups, _ = _slices(b, 0, ends, sizes)
    start = _on_host(0)
    out = []
    for end, left, right in zip(ends, a_groups, b_groups, strict=True):
        any_rows = ops.greater(end, start)
        if not a.device.is_cpu():
            any_rows = ops.transfer_to(any_rows, a.device)
        out.append(group_contraction(left, right, static_size(total), any_rows))
        start = end
    return ops.stack(out, 0)


# -- transformers' fallback (float32 and float16 experts under torch.compile) --


def _groups_fixed(offs: torch.Tensor) -> str | None:
    """Why ``offs`` does not give a fixed number (one or more) of groups."""
    if offs.dim() != 1 or not isinstance(offs.shape[0], int) or offs.shape[0] < 1:
        return f"offs of shape {list(offs.shape)} (a fixed number of groups)"
    return None


def _fallback_covered(node: torch.fx.Node) -> str | None:
    """Floating-point input [S, K] and weight [E, K, N] of one dtype, integer
    offs of a fixed length."""
    x, weight, offs = (arg_meta(node, i) for i in range(3))
    if x is None or weight is None or offs is None:
        return "arguments that are not tensors"
    if x.dtype not in _FLOATS or weight.dtype != x.dtype:
        return f"input {x.dtype} and weight {weight.dtype}"
    if offs.dtype not in (torch.int32, torch.int64):
        return f"offs of {offs.dtype}"
    return _groups_fixed(offs)


@lowering("transformers::grouped_mm_fallback", supports=_fallback_covered)
def grouped_mm_fallback(
    input: TensorValue, weight: TensorValue, offs: TensorValue
) -> TensorValue:
    """transformers::grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor"""
    return grouped_rows(input, weight, offs)


@lowering("transformers::grouped_mm_fallback_backward", supports=_fallback_covered)
def grouped_mm_fallback_backward(
    input: TensorValue, weight: TensorValue, offs: TensorValue, grad_output: TensorValue
) -> tuple[TensorValue, TensorValue]:
    """transformers::grouped_mm_fallback_backward(Tensor input, Tensor weight, Tensor offs, Tensor grad_output) -> (Tensor, Tensor)"""
    grad_input = grouped_rows(grad_output, ops.transpose(weight, 1, 2), offs)
    grad_weight = grouped_contraction(ops.transpose(input, 0, 1), grad_output, offs)
    return grad_input, grad_weight


# -- aten._grouped_mm (bfloat16 experts; its own backward) --------------------


def _grouped_mm_covered(node: torch.fx.Node) -> str | None:
    """Rows grouped against a 3-d weight, groups along K (the weight's
    gradient) or a 3-d batch without offs; no bias, the inputs' dtype out."""
    a, b, offs = arg_meta(node, 0), arg_meta(node, 1), arg_meta(node, 2, "offs")
    if a is None or b is None or a.dtype not in _FLOATS or b.dtype != a.dtype:
        return "operands that are not floating-point tensors of one dtype"
    if node_arg(node, 3, "bias", None) is not None:
        return "a bias"
    out_dtype = node_arg(node, 4, "out_dtype", None)
    if out_dtype not in (None, a.dtype):
        return f"out_dtype={out_dtype}"
    fixed = None if offs is None else _groups_fixed(offs)
    if fixed is not None:
        return fixed
    ranks = (a.dim(), b.dim(), offs is not None)
    if ranks not in ((2, 3, True), (2, 2, True), (3, 3, False)):
        return f"a {a.dim()}-d by {b.dim()}-d product {'with' if ranks[2] else 'without'} offs"
    return None


@lowering(aten._grouped_mm.default, supports=_grouped_mm_covered)
def _grouped_mm(
    self: TensorValue,
    mat2: TensorValue,
    offs: TensorValue | None = None,
    bias: TensorValue | None = None,
    out_dtype: torch.dtype | None = None,
) -> TensorValue:
    """_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor"""
    if offs is None:
        return product(self, mat2)
    if mat2.rank == 3:
        return grouped_rows(self, mat2, offs)
    return grouped_contraction(self, mat2, offs)
