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
eager. What a training forward saves for its backward stays contiguous: only
our own backward graph reads it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

import sympy
import torch
from torch._ops import OpOverload

from ...plan import Layout, SizeExpr
from ..shapes import storage_order

# A size (int or SymInt) as a size expression of the FX inputs' sizes.
SizeConverter = Callable[[int | torch.SymInt], SizeExpr]


@dataclass(frozen=True)
class CallerOutputs:
    """The positions in a graph's output tuple, ``start`` up to ``stop`` (None:
    to the end), whose tensors reach the caller as the graph returns them."""

    start: int = 0
    stop: int | None = None

    def __contains__(self, position: int) -> bool:
        return self.start <= position and (self.stop is None or position < self.stop)

    def __str__(self) -> str:
        return f"outputs {self.start}:{'' if self.stop is None else self.stop}"


# An inference graph's: every output.
ALL_OUTPUTS = CallerOutputs()


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


def memory_order(meta: torch.Tensor) -> list[int] | None:
    """The dimensions of a dense, static-shaped, non-contiguous ``meta`` from
    the outermost in memory to the innermost (NHWC's [0, 2, 3, 1]), or None
    where it is contiguous, has holes or overlaps, or sizes unknown until
    run time."""
    sizes, strides = meta.shape, meta.stride()
    if not all(isinstance(s, int) for s in (*sizes, *strides)) or meta.numel() == 0:
        return None
    if is_contiguous(meta):
        return None
    return storage_order(meta)


def layout(meta: torch.Tensor, convert: SizeConverter) -> Layout:
    """``meta``'s sizes, strides and storage offset as ``as_strided`` takes them."""
    return (
        tuple(convert(s) for s in meta.shape),
        tuple(convert(s) for s in meta.stride()),
        convert(meta.storage_offset()),
    )
