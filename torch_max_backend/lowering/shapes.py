"""Dimension and size helpers shared by the lowerings."""

from __future__ import annotations

from collections.abc import Sequence

from max.graph import Dim, StaticDim, TensorValue

SizeLike = int | Dim


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


def numel(x: TensorValue, dims: Sequence[int]) -> Dim:
    """Number of elements over ``dims`` of ``x``, static when the dims are."""
    total: Dim = StaticDim(1)
    for d in dims:
        total = total * x.shape[d]
    return total
