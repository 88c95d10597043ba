"""Size queries on tensors (sym_size, sym_numel, ...) and resize_.

With dynamic shapes, graphs ask tensors for their sizes; MAX answers with
its own symbolic dims, so these lowerings return ``Dim`` values (or plain
ints when torch already knows the answer) rather than tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.graph import Dim, StaticDim, TensorValue, ops

from ..context import current
from ..kit import arg_tensor, fake_tensor, is_static, node_arg
from ..registry import lowering
from ..shapes import SizeLike, normalize_dim, size_product

aten = torch.ops.aten


def _known(value: object) -> int | bool | None:
    """The node's value when torch already knows it as a plain number."""
    if isinstance(value, (bool, int)):
        return value
    if isinstance(value, (torch.SymInt, torch.SymBool)):
        expr = value.node.expr
        if expr.is_number:
            return bool(expr) if isinstance(value, torch.SymBool) else int(expr)
    return None


@lowering(aten.sym_size.int)
def sym_size(self: TensorValue, dim: int) -> Dim:
    """sym_size.int(Tensor self, int dim) -> SymInt"""
    return self.shape[normalize_dim(dim, self.rank)]


@lowering(aten.sym_numel.default)
def sym_numel(self: TensorValue) -> Dim:
    """sym_numel(Tensor self) -> SymInt"""
    return size_product(self.shape)


def _contiguous_or_known(node: torch.fx.Node) -> str | None:
    """Values torch knows at compile time, or strides of contiguous tensors."""
    if _known(node.meta.get("val")) is not None:
        return None
    meta = arg_tensor(node, 0)
    if node.target is aten.sym_stride.int and meta.is_contiguous():
        return None
    return f"{node.target} of a tensor whose layout is only known at run time"


@lowering(aten.sym_stride.int, supports=_contiguous_or_known)
def sym_stride(self: TensorValue, dim: int) -> Dim | int:
    """sym_stride.int(Tensor self, int dim) -> SymInt"""
    known = _known(current().out_meta)
    if known is not None:
        return int(known)
    stride: Dim = StaticDim(1)
    for d in list(self.shape)[normalize_dim(dim, self.rank) + 1 :]:
        stride = stride * d
    return stride


@lowering(aten.sym_storage_offset.default, supports=_contiguous_or_known)
def sym_storage_offset(self: TensorValue) -> int:
    """sym_storage_offset(Tensor self) -> SymInt"""
    return int(_known(current().out_meta) or 0)


@lowering(aten.sym_is_contiguous.default, supports=_contiguous_or_known)
def sym_is_contiguous(
    self: TensorValue, memory_format: torch.memory_format = torch.contiguous_format
) -> bool:
    """sym_is_contiguous(Tensor self, MemoryFormat memory_format=0) -> SymBool"""
    return bool(_known(current().out_meta))


def _not_an_input(node: torch.fx.Node) -> str | None:
    """Graph intermediates with static sizes (not the caller's tensors)."""
    target = node.args[0]
    meta = fake_tensor(target)
    if isinstance(target, torch.fx.Node) and target.op == "placeholder":
        return "resize_ of a graph input (its storage belongs to the caller)"
    if not is_static([*meta.shape, *node_arg(node, 1, "size", ())]):
        return "resize_ with symbolic sizes"
    return None


@lowering(aten.resize_.default, supports=_not_an_input)
def resize_(
    self: TensorValue,
    size: Sequence[SizeLike],
    *,
    memory_format: torch.memory_format | None = None,
) -> TensorValue:
    """resize_(Tensor(a!) self, SymInt[] size, *, MemoryFormat? memory_format=None) -> Tensor(a!)"""
    # Storage keeps its leading elements; new ones are uninitialized in
    # torch (zeros here).
    old = 1
    for d in self.shape:
        old *= int(d)
    new = 1
    for n in size:
        new *= int(n)
    flat = ops.reshape(self, [old])
    if new <= old:
        flat = flat[:new]
    else:
        zeros = ops.broadcast_to(
            ops.constant(0, self.dtype, device=self.device), [new - old]
        )
        flat = ops.concat([flat, zeros], axis=0)
    return ops.reshape(flat, list(size))
