"""A multi-output lowering's outputs as torch's meta gives them: which are
wanted, and in which dtypes.

ATen's backward ops (layer norm's, batch norm's, convolution's) take an
``output_mask`` and return a tuple whose entries torch's meta may give as
None. Normalizations compute their outputs and statistics in float32 for
half precision (as torch's kernels), and those go back to the dtypes torch
gives each output.
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
    """Each output cast to the dtype torch gives the output at its position
    (the first outputs, as many as given). A value already in that dtype is
    returned as it is: ops.cast would wrap it in a new value, and the layout
    pass knows channels-last twins by the identity of the value."""
    meta = current().out_meta
    assert isinstance(meta, (list, tuple))
    out: list[TensorValue | None] = []
    for value, m in zip(values, meta[: len(values)], strict=True):
        if value is not None and m is not None and value.dtype != to_max_dtype(m.dtype):
            value = ops.cast(value, to_max_dtype(m.dtype))
        out.append(value)
    return tuple(out)
