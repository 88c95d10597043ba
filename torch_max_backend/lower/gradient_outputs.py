"""A backward lowering's outputs: which torch wants, and in which dtypes.

ATen's backward ops (layer norm's, batch norm's, convolution's) take an
``output_mask`` and return a tuple whose entries torch's meta may give as
None; their gradients are often computed in float32 and go back to the
input's half precision.
"""

from __future__ import annotations

from collections.abc import Sequence

from max.graph import TensorValue, ops

from ..dtypes import to_max_dtype
from .context import current


def wanted_outputs(output_mask: Sequence[bool]) -> list[bool]:
    """Which outputs to compute: asked for, and not None in torch's meta.

    The meta also says None where an input the gradient belongs to is
    absent (a layer norm without weight), whatever the mask says.
    """
    meta = current().out_meta
    assert isinstance(meta, (list, tuple))
    return [bool(m) and v is not None for m, v in zip(output_mask, meta, strict=True)]


def in_meta_dtypes(
    values: Sequence[TensorValue | None],
) -> tuple[TensorValue | None, ...]:
    """Each output cast to the dtype torch gives it. A value already in that
    dtype is returned as it is (its identity names its channels-last twin)."""
    meta = current().out_meta
    assert isinstance(meta, (list, tuple))
    out: list[TensorValue | None] = []
    for value, m in zip(values, meta, strict=True):
        if value is not None and m is not None and value.dtype != to_max_dtype(m.dtype):
            value = ops.cast(value, to_max_dtype(m.dtype))
        out.append(value)
    return tuple(out)
