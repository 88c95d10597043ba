"""Reductions over several axes as MAX builds them: one axis per reduction.

Adjacent axes of static sizes are reduced as one merged axis, the
innermost run first, and a value that permutes another (a channels-last
twin, a product convolution's C, N, H, W result: layout.py) is reduced in
that other's layout, its rows in memory order. A training batch norm's
mean over N, H, W was three passes over non-inner axes of an NCHW copy;
it is one over the convolution's own rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

from max.graph import Dim, TensorValue, ops

from .context import current
from .layout import ChannelsLastTwins, permute_dims
from .shapes import normalize_dims, static_size

Reducer = Callable[[TensorValue, int], TensorValue]


def reduce_axes(
    x: TensorValue, dims: Sequence[int] | int | None, keepdim: bool, fn: Reducer
) -> TensorValue:
    """``fn`` over ``dims`` (MAX reduces one axis a reduction, keeping it),
    merged and in the layout of the value ``x`` permutes (``in_layout``)."""
    if x.rank == 0:
        return fn(ops.reshape(x, [1]), 0).reshape([])
    axes = normalize_dims(dims, x.rank)
    y, y_axes, back = in_layout(x, axes)
    return squeezed(back(reduce_runs(y, y_axes, fn)), axes, keepdim)


def sum_to(
    x: TensorValue, axes: Sequence[int], shape: Sequence[int | Dim]
) -> TensorValue:
    """``x`` summed over ``axes``, then reshaped to ``shape`` (a gradient
    reduced to its parameter's shape)."""
    return ops.reshape(reduce_axes(x, axes, True, ops.sum), list(shape))


def squeezed(x: TensorValue, axes: list[int], keepdim: bool) -> TensorValue:
    """A kept reduction over ``axes`` without them unless ``keepdim``."""
    if not keepdim:
        for axis in reversed(axes):
            x = ops.squeeze(x, axis)
    return x


def in_layout(
    x: TensorValue, axes: list[int]
) -> tuple[TensorValue, list[int], Callable[[TensorValue], TensorValue]]:
    """The value to reduce ``x``'s ``axes`` in, those axes there, and the map
    of a kept result back to ``x``'s layout: the value ``x`` permutes where
    there is one (a channels-last twin, a convolution's C, N, H, W product),
    else ``x`` itself."""
    twins = _twins()
    found = None if twins is None else twins.source(x)
    if twins is None or found is None or len(axes) == x.rank:
        return x, axes, lambda kept: kept
    source, perm = found
    if source.rank != x.rank:
        return x, axes, lambda kept: kept
    if twins.twin(x) is source:
        back = twins.channels_first
    else:
        back = partial(permute_dims, perm=perm)
    return source, sorted(perm[a] for a in axes), back


def _twins() -> ChannelsLastTwins | None:
    """The graph's channels-last twins, or None outside the graph builder."""
    try:
        return current().twins
    except RuntimeError:
        return None


def reduce_runs(x: TensorValue, axes: list[int], fn: Reducer) -> TensorValue:
    """``fn`` over ``axes`` (sorted), each dim kept with size 1.

    Adjacent axes of static sizes are reduced as one merged axis, the
    innermost run first: NCHW's (0, 2, 3) is one pass over rows of H*W then
    one over N, where a reduction per axis wrote two large partial results
    (a batch norm's statistics: 3 passes of 6, all over non-inner axes).
    Any associative reduction (sum, mean of equal groups, max, min, prod)
    gives the same value merged.
    """
    runs: list[list[int]] = []
    for axis in axes:
        if runs and runs[-1][-1] == axis - 1 and _static_run([*runs[-1], axis], x):
            runs[-1].append(axis)
        else:
            runs.append([axis])
    for run in reversed(runs):
        if len(run) == 1:
            x = fn(x, run[0])
            continue
        shape = list(x.shape)
        first, last = run[0], run[-1]
        merged = math.prod(int(shape[a]) for a in run)
        x = fn(ops.reshape(x, [*shape[:first], merged, *shape[last + 1 :]]), first)
        x = ops.reshape(x, [*shape[:first], *([1] * len(run)), *shape[last + 1 :]])
    return x


def _static_run(run: list[int], x: TensorValue) -> bool:
    return all(static_size(x.shape[a]) is not None for a in run)
