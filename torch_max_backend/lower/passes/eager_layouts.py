"""Returned tensors with the strides and aliasing eager PyTorch gives them.

MAX writes every output contiguous and in memory of its own, where eager
PyTorch returns ``y[:, -1]`` as a view sharing ``y``'s memory and ``x * 2`` of
a channels-last or transposed ``x`` in ``x``'s memory order. AOTAutograd
makes views of inputs again from the inputs, and in training graphs views of
outputs from their bases, but the outputs themselves reach the caller as the
compiler returns them: every output of an inference graph, the user outputs
of a training forward (``CallerOutputs``). So there, a dense output whose
eager strides are a permuted memory order is written by MAX in that order,
and an output that views another node's memory is that node's MAX output
read through ``as_strided``: sizes, strides and offsets as eager's, and
writing into one output changes the others that share its memory, as in
eager. What a training forward saves for its backward, which only our own
backward graph reads, stays contiguous, but for tensors traced channels-last:
the backward takes those as they lie (``_saved_layout``).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

import sympy
import torch
from torch._ops import OpOverload

from ..kit import size_hint
from ..layout import takes_channels_last
from .findings import (
    ALL_OUTPUTS,
    NO_OUTPUTS,
    CallerOutputs,
    EagerLayout,
    GraphFindings,
    frozen_map,
)

__all__ = ["ALL_OUTPUTS", "NO_OUTPUTS", "CallerOutputs", "find_eager_layouts"]


def _is_view_op(target: object) -> bool:
    """An op whose result (or each of whose results) aliases its first argument."""
    if not isinstance(target, OpOverload) or not target._schema.returns:
        return False
    alias = target._schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def viewed_node(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node whose memory ``node`` views, through any chain of views."""
    root = node
    while root.op == "call_function":
        source = root.args[0] if root.args else None
        if root.target is operator.getitem and isinstance(source, torch.fx.Node):
            # One piece of a split or unbind: a view of what was split.
            if source.op != "call_function" or not _is_view_op(source.target):
                break
            source = source.args[0]
        elif not _is_view_op(root.target):
            break
        if not isinstance(source, torch.fx.Node):
            break
        root = source
    if root is node or not _shares_storage(node, root):
        return None
    return root


def _shares_storage(node: torch.fx.Node, root: torch.fx.Node) -> bool:
    view, base = node.meta.get("val"), root.meta.get("val")
    if not isinstance(view, torch.Tensor) or not isinstance(base, torch.Tensor):
        return False
    try:
        return view.untyped_storage()._cdata == base.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return False


def _expr(size: int | torch.SymInt) -> sympy.Expr:
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)


def is_contiguous(meta: torch.Tensor) -> bool:
    """Whether ``meta``'s strides are row-major, decided on its size
    expressions (no guard is added); size-1 dimensions have any stride."""
    expected = sympy.Integer(1)
    for size, stride in reversed(list(zip(meta.shape, meta.stride(), strict=True))):
        size_expr = _expr(size)
        if size_expr != 1 and sympy.expand(_expr(stride) - expected) != 0:
            return False
        expected = expected * size_expr
    return True


def memory_order(meta: torch.Tensor, exact: bool = True) -> list[int] | None:
    """The dimensions of a dense, non-contiguous ``meta`` from the outermost
    in memory to the innermost (NHWC's [0, 2, 3, 1]), or None where it is
    contiguous, empty, has holes or overlaps. Symbolic sizes and strides
    (a dynamic batch) are ordered by the values they were traced with and
    checked on their expressions, which adds no guard; or, not ``exact``,
    on those values: Dynamo makes strides symbols of their own once a frame
    meets a second layout, which no expression of sizes proves dense, and a
    whole output written in an order needs no more than the order."""
    sizes, strides = meta.shape, meta.stride()
    size_hints = [size_hint(s) for s in sizes]
    stride_hints = [size_hint(s) for s in strides]
    if None in size_hints or None in stride_hints or 0 in size_hints:
        return None
    # Size-1 dims have any stride and no effect on the order: innermost.
    order = sorted(
        range(len(sizes)),
        key=lambda d: -stride_hints[d] if size_hints[d] != 1 else 0,  # type: ignore[operator]
    )
    if order == sorted(order) or is_contiguous(meta):
        return None
    expected, hinted = sympy.Integer(1), 1
    for d in reversed(order):
        size, traced = _expr(sizes[d]), size_hints[d]
        if exact and size != 1 and sympy.expand(_expr(strides[d]) - expected) != 0:
            return None
        if traced != 1 and stride_hints[d] != hinted:
            return None
        expected, hinted = expected * size, hinted * traced  # type: ignore[operator]
    return order


def _eager_layout(item: object) -> EagerLayout | None:
    """How the returned ``item`` keeps eager's layout: read through
    ``as_strided`` from its root's MAX output, written in the root's memory
    order; None where it is contiguous memory of its own, or that memory is
    an input's or not dense."""
    if not isinstance(item, torch.fx.Node):
        return None
    meta = item.meta.get("val")
    if not isinstance(meta, torch.Tensor) or item.op == "placeholder":
        return None
    root = viewed_node(item) or item
    if root.op == "placeholder":
        return None
    base_meta = root.meta["val"]
    if root is item:
        # A whole output: written in its order, its strides those of the
        # order (lower/builder/outputs.py).
        order = memory_order(base_meta, exact=False)
        return None if order is None else EagerLayout(root, tuple(order))
    if is_contiguous(base_meta):
        return EagerLayout(root, None)
    order = memory_order(base_meta)
    return None if order is None else EagerLayout(root, tuple(order))


def find_eager_layouts(
    gm: torch.fx.GraphModule, found: GraphFindings
) -> Mapping[int, EagerLayout]:
    """The pass: each of ``found.caller_outputs``' positions that keeps
    eager's layout, and how."""
    if found.caller_outputs is None:
        return frozen_map()
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    items = output.args[0]
    items = items if isinstance(items, (list, tuple)) else [items]
    layouts = {}
    saved_from = found.caller_outputs.stop
    for position, item in enumerate(items):
        if position in found.caller_outputs:
            layout = _eager_layout(item)
        elif saved_from is not None and position >= saved_from:
            layout = _saved_layout(item)
        else:
            layout = None
        if layout is not None:
            layouts[position] = layout
    return frozen_map(layouts)


def _saved_layout(item: object) -> EagerLayout | None:
    """How a training forward returns a tensor it saves for the backward:
    as eager lays it out where it was traced channels-last (a channels-last
    model's activations, which the forward holds channels-last anyway, or a
    view of one such as a ``detach``), since the backward graph takes such
    an input as it lies (builder/channels_last_inputs.py) and would copy one
    that arrived contiguous at every call; else contiguous."""
    meta = item.meta.get("val") if isinstance(item, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor) or not takes_channels_last(meta):
        return None
    return _eager_layout(item)
