"""Copies that only restride a value, dropped where nothing reads the strides.

torch's decompositions end an in-place op whose result strides differ from
its input's with ``prims.copy_strided(result, input.stride())``. A
channels-last depthwise filter [C, 1, kh, kw] has strides (kh * kw, 1, kw,
1) where its contiguous gradient has (kh * kw, kh * kw, kw, 1): the same
memory order, yet AdamW's ``exp_avg.lerp_(grad)`` copies the new moment back
to the filter's strides. A MAX graph holds values, not layouts, so the copy
moves nothing; but standing between the lerp and its write-back it hid the
update from the optimizer-update patterns (passes/adam_updates.py).

A copy is dropped, its readers reading its input, where no reader can see
the strides: it keeps the memory order (strides differ at size-1 dims
alone), or every reader is elementwise (a fresh value with strides of its
own) or AOTAutograd's write-back into an input (values copied into the
input's own layout). A copy the graph returns, or one a view reads in
another memory order, stays, and is lowered as the value it copies
(lower/ops/shape.py).
"""

from __future__ import annotations

import logging

import torch

from .graph_copy import graph_copy
from .mutations import writes_input

_log = logging.getLogger("torch_max_backend.lower.strided_copies")

COPY_STRIDED = torch.ops.prims.copy_strided.default


def _same_order(node: torch.fx.Node) -> bool:
    """Whether the copy's strides and its input's agree on every dim of size
    over 1 (as traced): the same memory order."""
    source, copied = node.args[0].meta.get("val"), node.meta.get("val")
    if not (isinstance(source, torch.Tensor) and isinstance(copied, torch.Tensor)):
        return False
    return all(
        size == 1 or a == b
        for size, a, b in zip(
            source.shape, source.stride(), copied.stride(), strict=True
        )
    )


def _reads_values_only(reader: torch.fx.Node, copy: torch.fx.Node) -> bool:
    """Whether ``reader`` computes from ``copy``'s values alone."""
    if reader.op != "call_function":
        return False
    target = reader.target
    if writes_input(reader, reader.args[0]) and reader.args[0] is not copy:
        return True
    return torch.Tag.pointwise in getattr(target, "tags", ())


def _droppable(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not COPY_STRIDED:
        return False
    if not isinstance(node.args[0], torch.fx.Node):
        return False
    if any(reader.op == "output" for reader in node.users):
        return False  # returned: the caller gets eager's strides
    return _same_order(node) or all(_reads_values_only(r, node) for r in node.users)


def without_strided_copies(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each droppable ``prims.copy_strided`` replaced by its
    input; ``gm`` itself when there is none (so its MAX graph stays the same)."""
    dropped = [node for node in gm.graph.nodes if _droppable(node)]
    if not dropped:
        return gm
    graph, copies = graph_copy(gm)
    for node in dropped:
        copy = copies[node]
        copy.replace_all_uses_with(copy.args[0])
        graph.erase_node(copy)
    _log.debug("dropped %d strided copies", len(dropped))
    return torch.fx.GraphModule(gm, graph)
