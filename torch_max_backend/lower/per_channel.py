"""A batch norm's per-channel affine map, shared by its inference and
training lowerings: ``x * scale + shift`` with one scale and shift per
channel (dim 1), computed in the statistics' dtype.
"""

from __future__ import annotations

from max.graph import TensorValue, ops

from .context import current


def channel_view(x: TensorValue, rank: int) -> TensorValue:
    """A per-channel [C] vector shaped to broadcast over N, C, *spatial."""
    return ops.reshape(x, [1, -1] + [1] * (rank - 2))


def normalized_channels(
    x: TensorValue,
    mean: TensorValue,
    rstd: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
) -> TensorValue:
    """(x - mean) * rstd * weight + bias per channel, in ``rstd``'s dtype,
    rounded to ``x``'s.

    Folded into one scale and shift, so a single multiply-add touches the
    activation. Where ``x`` has a channels-last twin the map runs on the
    twin (the [C] vectors broadcast over its last dim) and the result has a
    twin too.
    """
    dtype = rstd.dtype
    scale = rstd if weight is None else ops.mul(rstd, ops.cast(weight, dtype))
    shift = ops.negate(ops.mul(ops.cast(mean, dtype), scale))
    if bias is not None:
        shift = ops.add(shift, ops.cast(bias, dtype))
    twins = current().twins
    twin = twins.twin(x)
    if twin is not None:
        out = ops.add(ops.mul(ops.cast(twin, dtype), scale), shift)
        return twins.channels_first(ops.cast(out, x.dtype))
    rank = x.rank
    wide = ops.cast(x, dtype)
    out = ops.add(ops.mul(wide, channel_view(scale, rank)), channel_view(shift, rank))
    return ops.cast(out, x.dtype)
