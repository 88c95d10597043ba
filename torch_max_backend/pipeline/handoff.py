"""Layouts at the boundary between MAX blocks and the ops that run in PyTorch.

MAX hands back every tensor contiguous, with storage offset 0. Most PyTorch
ops read only values and do not care, but a few read storage through strides
(``as_strided`` and its scatter and copy forms, and ops tagged
``needs_exact_strides`` or ``needs_fixed_stride_order``): given a contiguous
tensor where eager PyTorch had a transposed or offset one, they would read the
wrong elements without a word. Each such op in a split graph gets its tensor
arguments in the layout torch's meta says eager would have given them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

logger = logging.getLogger(__name__)

aten = torch.ops.aten

_READS_STORAGE = {
    aten.as_strided.default,
    aten.as_strided_scatter.default,
    aten.as_strided_copy.default,
}
_STRIDE_TAGS = tuple(
    getattr(torch.Tag, name)
    for name in ("needs_exact_strides", "needs_fixed_stride_order")
    if hasattr(torch.Tag, name)
)


def reads_layout(node: torch.fx.Node) -> bool:
    """Whether the op of ``node`` gives results that depend on strides."""
    if node.op != "call_function":
        return False
    if node.target in _READS_STORAGE:
        return True
    tags = getattr(node.target, "tags", ())
    return any(tag in tags for tag in _STRIDE_TAGS)


def with_eager_layout(
    tensor: torch.Tensor, stride: Sequence[int], storage_offset: int
) -> torch.Tensor:
    """``tensor``, or a copy of it with ``stride`` and ``storage_offset``.

    The copy's storage starts ``storage_offset`` elements early, so that
    offsets count from where eager's base tensor began; elements before it
    belong to no value of the graph (a lowering reading them is refused).
    """
    if tuple(tensor.stride()) == tuple(stride) and (
        tensor.storage_offset() == storage_offset
    ):
        return tensor
    extent = 1 + sum((n - 1) * s for n, s in zip(tensor.shape, stride, strict=True))
    if tensor.numel() == 0:
        extent = 0
    storage = tensor.new_empty(storage_offset + extent)
    # An expanded dim (stride 0) holds one element: write it once.
    shape = [
        n if s != 0 else min(n, 1) for n, s in zip(tensor.shape, stride, strict=True)
    ]
    storage.as_strided(shape, stride, storage_offset).copy_(
        tensor[tuple(slice(0, n) for n in shape)]
    )
    return storage.as_strided(tensor.shape, stride, storage_offset)


def keep_eager_layouts(gm: torch.fx.GraphModule) -> int:
    """Insert ``with_eager_layout`` before each argument of a layout-reading op
    whose eager layout is not contiguous; returns how many were inserted."""
    inserted = 0
    for node in list(gm.graph.nodes):
        if not reads_layout(node):
            continue
        for arg in list(node.all_input_nodes):
            meta = arg.meta.get("val")
            if not isinstance(meta, torch.Tensor):
                continue
            stride, offset = list(meta.stride()), meta.storage_offset()
            if not all(isinstance(v, int) for v in [*stride, offset]):
                logger.warning(
                    "%s reads %s with symbolic strides: its layout is not checked",
                    node.name,
                    arg.name,
                )
                continue
            if meta.is_contiguous() and offset == 0:
                continue  # what MAX hands back already
            with gm.graph.inserting_before(node):
                laid = gm.graph.call_function(with_eager_layout, (arg, stride, offset))
            laid.meta = dict(arg.meta)
            node.replace_input_with(arg, laid)
            inserted += 1
    return inserted
