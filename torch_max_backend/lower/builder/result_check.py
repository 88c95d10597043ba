"""What a lowering returned, checked against what torch's meta says it
returns: a wrong dtype or static size is the lowering's bug, named here
before MAX reports it far from its cause."""

from __future__ import annotations

from typing import Any

import torch
from max.graph import TensorValue

from ...dtypes import to_max_dtype
from ..shapes import static_size


def check_result(node: torch.fx.Node, result: Any) -> None:
    """A lowering's result must have the dtype and static sizes torch says."""
    meta = node.meta.get("val")
    if isinstance(result, TensorValue) and isinstance(meta, torch.Tensor):
        expected = to_max_dtype(meta.dtype)
        if result.dtype != expected:
            raise TypeError(
                f"lowering returned dtype {result.dtype.name}, expected {expected.name}"
            )
        got = [static_size(d) for d in result.shape]
        want = [s if isinstance(s, int) else None for s in meta.shape]
        mismatch = len(got) != len(want) or any(
            g is not None and w is not None and g != w
            for g, w in zip(got, want, strict=True)
        )
        if mismatch:
            raise TypeError(
                f"lowering returned shape {list(result.shape)}, "
                f"expected {list(meta.shape)}"
            )
    elif (
        isinstance(result, (list, tuple))
        and isinstance(meta, (list, tuple))
        and len(result) != len(meta)
    ):
        raise TypeError(f"lowering returned {len(result)} values, expected {len(meta)}")
