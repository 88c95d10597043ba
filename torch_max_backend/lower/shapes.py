"""Dimension and size helpers shared by the lowerings."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence

import sympy
import torch
from max.dtype import DType
from max.graph import DeviceRef, Dim, Graph, StaticDim, TensorValue, ops
from torch.utils._sympy.functions import CleanDiv, FloorDiv

from ..errors import MaxCompilerError
from .index_origin import origin_start, runtime_int

SizeLike = int | Dim


def max_dim(size: int | torch.SymInt, where: str) -> int | str:
    """A torch size as a MAX dim: an int, or the name of its symbol (every
    graph names a symbolic size after its sympy symbol, e.g. "s0")."""
    if isinstance(size, int):
        return size
    expr = size.node.expr
    if isinstance(expr, sympy.Symbol):
        return str(expr)
    if expr.is_number:
        return int(expr)
    raise MaxCompilerError(
        f"{where} has a size given by the expression {expr}; torch-max-backend "
        "takes symbolic input sizes that are plain symbols"
    )


def expression_dim(expr: sympy.Expr) -> Dim | None:
    """A size expression of symbols (``16*s0``, ``(s1 - 1)//2 + 1``) as the
    MAX dim that computes it from the dims named after those symbols; None
    for a form MAX dims cannot compute."""
    if expr.is_Integer:
        return StaticDim(int(expr))
    if isinstance(expr, sympy.Symbol):
        return Dim(str(expr))
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
        base = expression_dim(expr.base)
        return None if base is None else size_product([base] * int(expr.exp))
    parts = [expression_dim(a) for a in expr.args]
    if any(p is None for p in parts):
        return None
    if isinstance(expr, sympy.Add):
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total
    if isinstance(expr, sympy.Mul):
        return size_product(parts)
    if isinstance(expr, (FloorDiv, CleanDiv)):
        return parts[0] // parts[1]
    return None


# Per MAX graph, the fresh dims named so far: names must differ within a graph
# (one name is one size) and repeat across builds (MAX caches by graph text).
_FRESH: weakref.WeakKeyDictionary[Graph, itertools.count] = weakref.WeakKeyDictionary()


def fresh_dim(prefix: str) -> Dim:
    """A symbolic dim no other value of the graph being built has: a size
    known only at run time, such as a slice whose bounds are tensors."""
    counter = _FRESH.setdefault(Graph.current, itertools.count())
    return Dim(f"{prefix}_{next(counter)}")


def normalize_dim(dim: int, rank: int) -> int:
    """A non-negative axis; a 0-d tensor accepts dims 0 and -1 as torch does."""
    bound = max(rank, 1)
    if not -bound <= dim < bound:
        raise IndexError(f"dim {dim} is out of range for a tensor of rank {rank}")
    return dim + bound if dim < 0 else dim


def normalize_dims(dims: Sequence[int] | int | None, rank: int) -> list[int]:
    """Reduction dims: None or [] mean every dim."""
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return list(range(rank))
    return sorted({normalize_dim(d, rank) for d in dims})


def static_size(dim: Dim) -> int | None:
    return int(dim) if isinstance(dim, StaticDim) else None


def size_like(dim: Dim | int) -> SizeLike:
    """A static size as an int, a symbolic one as the dim it is."""
    if isinstance(dim, int):
        return dim
    size = static_size(dim)
    return dim if size is None else size


def size_product(sizes: Sequence[SizeLike]) -> Dim:
    """The product of ``sizes``, static when they all are."""
    total: Dim = StaticDim(1)
    for size in sizes:
        total = total * size
    return total


def numel(x: TensorValue, dims: Sequence[int]) -> Dim:
    """Number of elements over ``dims`` of ``x``, static when the dims are."""
    return size_product([x.shape[d] for d in dims])


def positions(x: TensorValue, axis: int) -> TensorValue:
    """0, 1, ..., size - 1 along ``axis`` of ``x`` as int64, static or symbolic."""
    return counting(x.shape[axis], x.device)


def counting(size: Dim | int, device: DeviceRef) -> TensorValue:
    """0, 1, ..., size - 1 as int64 on ``device``, static or symbolic."""
    n = size if isinstance(size, int) else static_size(size)
    if n is not None:
        start = origin_start()
        if start is None:
            return ops.range(0, n, 1, out_dim=n, dtype=DType.int64, device=device)
        # From a runtime zero: MAX then computes it at every call instead of
        # folding it at compile time (index_origin.py).
        stop = runtime_int(n, DeviceRef.CPU())
        step = ops.constant(1, DType.int64, device=DeviceRef.CPU())
        return ops.range(start, stop, step, out_dim=n, dtype=DType.int64, device=device)
    stop = ops.cast(ops.shape_to_tensor([size]).reshape([]), DType.int64)
    start = ops.constant(0, DType.int64, device=device)
    step = ops.constant(1, DType.int64, device=device)
    return ops.range(start, stop, step, out_dim=size, dtype=DType.int64, device=device)


def size_value(size: SizeLike, plus: int = 0) -> int | TensorValue:
    """``size + plus``: a Python int when the size is static (MAX would fold
    arithmetic on constants at compile time, compiling a kernel for it), else
    an int64 scalar read from the shape at run time."""
    n = static_size(size)
    if n is not None:
        return n + plus
    value = ops.cast(ops.shape_to_tensor([size]).reshape([]), DType.int64)
    if plus:
        value = ops.add(value, ops.constant(plus, DType.int64, DeviceRef.CPU()))
    return value


def index_along(x: TensorValue, axis: int, index: slice | int) -> TensorValue:
    """``x`` indexed by ``index`` along ``axis``, every other dim whole."""
    selector: list[slice | int] = [slice(None)] * x.rank
    selector[axis] = index
    return x[tuple(selector)]


def along(values: TensorValue, axis: int, rank: int) -> TensorValue:
    """A 1-d ``values`` reshaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    shape: list[int | Dim] = [1] * rank
    shape[axis] = values.shape[0]
    return ops.reshape(values, shape)


def broadcast_shape(values: Sequence[TensorValue]) -> list[Dim]:
    """The shape ``values`` broadcast to, by torch's rules (sizes torch has
    already checked compatible: any size other than 1 wins)."""
    rank = max(v.rank for v in values)
    shape: list[Dim] = []
    for i in range(rank):
        size: Dim = StaticDim(1)
        for v in values:
            j = i - (rank - v.rank)
            if j >= 0 and static_size(v.shape[j]) != 1:
                size = v.shape[j]
        shape.append(size)
    return shape


def storage_order(meta: torch.Tensor) -> list[int] | None:
    """The dims of ``meta`` from outermost to innermost in memory, when its
    elements fill their stretch of storage densely without overlap (any
    permutation of a contiguous layout); None otherwise."""
    sizes, strides = list(meta.shape), list(meta.stride())
    # Size-1 dims have arbitrary strides and no effect on the order.
    order = sorted(range(len(sizes)), key=lambda d: -strides[d] if sizes[d] != 1 else 0)
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    return order


def conv_out_size(
    size: SizeLike, kernel: int, stride: int, padding: int, dilation: int
) -> SizeLike:
    """An output size of a convolution along one spatial axis (torch's formula),
    an expression of the input's when that is symbolic."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
