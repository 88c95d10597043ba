"""Comparisons, logic, bitwise ops (a shipped Mojo kernel for integers),
``where`` and ``masked_fill``, with torch's promotion of their operands."""

from __future__ import annotations

from collections.abc import Callable

import torch
from max.dtype import DType
from max.graph import TensorType, TensorValue, ops

from ...kernels.library import SHIPPED, custom
from ..checks import fail_when
from ..context import current
from ..registry import lowering
from ..scalars import Operand, as_tensor, out_max_dtype, promote
from ..shapes import broadcast_shape

aten = torch.ops.aten


# -- comparisons ----------------------------------------------------------------


def _compare(
    op: torch._ops.OpOverload,
    fn: Callable[[TensorValue, TensorValue], TensorValue],
    swap: bool,
) -> None:
    def lower(self: Operand, other: Operand) -> TensorValue:
        a, b = promote(self, other)
        result = fn(b, a) if swap else fn(a, b)
        if fn is ops.not_equal and a.dtype.is_float():
            # MAX's not_equal is ordered, false where either side is NaN
            # (x != 0.5 of a NaN); torch's is true there.
            return ops.logical_or(result, ops.logical_or(ops.is_nan(a), ops.is_nan(b)))
        if not (isinstance(self, TensorValue) and isinstance(other, TensorValue)):
            return result
        return _with_nans_unequal(fn, a, result)

    lower.__name__ = op.__name__.replace(".", "_")
    lower.__doc__ = str(op._schema).removeprefix("aten::")
    lowering(op)(lower)


def _with_nans_unequal(
    fn: Callable[[TensorValue, TensorValue], TensorValue],
    a: TensorValue,
    result: TensorValue,
) -> TensorValue:
    """``result`` of comparing two float tensors, NaN unequal to itself.

    MAX simplifies a comparison of a value with itself (``x == x`` and
    ``x >= x`` to true), right only where x is not NaN; views
    and merged repeats make such pairs out of different nodes. When the
    operands differ, a NaN in ``a`` decides the result the same way, so the
    correction changes nothing there."""
    if not a.dtype.is_float() or fn is ops.greater:
        return result  # x > x is false, as for a NaN
    return ops.logical_and(result, ops.logical_not(ops.is_nan(a)))


for _name, _fn, _swap in [
    ("eq", ops.equal, False),
    ("ne", ops.not_equal, False),
    ("gt", ops.greater, False),
    ("ge", ops.greater_equal, False),
    ("lt", ops.greater, True),
    ("le", ops.greater_equal, True),
]:
    for _overload in ("Tensor", "Scalar"):
        _compare(getattr(getattr(aten, _name), _overload), _fn, _swap)


# -- logic ---------------------------------------------------------------------


def _as_bool(x: Operand) -> TensorValue:
    if isinstance(x, TensorValue) and not x.dtype.is_float() and x.dtype != DType.bool:
        return ops.not_equal(x, as_tensor(0, x.dtype))
    return as_tensor(x, DType.bool)  # a float: NaN is true


@lowering(aten.logical_not.default)
def logical_not(self: TensorValue) -> TensorValue:
    """logical_not(Tensor self) -> Tensor"""
    return ops.logical_not(_as_bool(self))


@lowering(aten.logical_and.default)
def logical_and(self: TensorValue, other: TensorValue) -> TensorValue:
    """logical_and(Tensor self, Tensor other) -> Tensor"""
    return ops.logical_and(_as_bool(self), _as_bool(other))


@lowering(aten.logical_or.default)
def logical_or(self: TensorValue, other: TensorValue) -> TensorValue:
    """logical_or(Tensor self, Tensor other) -> Tensor"""
    return ops.logical_or(_as_bool(self), _as_bool(other))


@lowering(aten.logical_xor.default)
def logical_xor(self: TensorValue, other: TensorValue) -> TensorValue:
    """logical_xor(Tensor self, Tensor other) -> Tensor"""
    return ops.logical_xor(_as_bool(self), _as_bool(other))


def _no_floats(node: torch.fx.Node) -> str | None:
    """Bool and integer tensors, as in torch (integers by a shipped Mojo kernel)."""
    for arg in node.args:
        meta = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg
        dtype = meta.dtype if isinstance(meta, torch.Tensor) else type(meta)
        if dtype is float or (
            isinstance(dtype, torch.dtype) and dtype.is_floating_point
        ):
            return f"bitwise op on {dtype} (torch takes bool and integer tensors)"
    return None


# Operation codes of the shipped Mojo kernel torch_max_backend_bitwise.
_BITWISE_CODE = {"and": 0, "or": 1, "xor": 2}


def _bitwise(
    op: str, self: Operand, other: Operand, logical: Callable[..., TensorValue]
) -> TensorValue:
    a, b = promote(self, other)
    if a.dtype == DType.bool:  # on bools, bitwise ops are the logical ones
        return logical(a, b)
    # MAX has no bitwise ops on integers: a Mojo kernel shipped with the package.
    shape = broadcast_shape([a, b])
    a, b = ops.broadcast_to(a, shape), ops.broadcast_to(b, shape)
    device = current().device
    (out,) = custom(
        SHIPPED,
        "torch_max_backend_bitwise",
        [a, b],
        [TensorType(a.dtype, shape, device)],
        device,
        parameters={"op": _BITWISE_CODE[op]},
    )
    return out


@lowering(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, supports=_no_floats)
def bitwise_and(self: Operand, other: Operand) -> TensorValue:
    """bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor
    bitwise_and.Scalar(Tensor self, Scalar other) -> Tensor
    """
    return _bitwise("and", self, other, ops.logical_and)


@lowering(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, supports=_no_floats)
def bitwise_or(self: Operand, other: Operand) -> TensorValue:
    """bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor
    bitwise_or.Scalar(Tensor self, Scalar other) -> Tensor
    """
    return _bitwise("or", self, other, ops.logical_or)


@lowering(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, supports=_no_floats)
def bitwise_xor(self: Operand, other: Operand) -> TensorValue:
    """bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor
    bitwise_xor.Scalar(Tensor self, Scalar other) -> Tensor
    """
    return _bitwise("xor", self, other, ops.logical_xor)


@lowering(aten.bitwise_not.default, supports=_no_floats)
def bitwise_not(self: TensorValue) -> TensorValue:
    """bitwise_not(Tensor self) -> Tensor"""
    if self.dtype == DType.bool:
        return ops.logical_not(self)
    device = current().device
    (out,) = custom(
        SHIPPED,
        "torch_max_backend_bitwise_not",
        [self],
        [TensorType(self.dtype, self.shape, device)],
        device,
    )
    return out


@lowering(
    aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar
)
def where(condition: TensorValue, self: Operand, other: Operand) -> TensorValue:
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor
    where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> Tensor
    where.ScalarSelf(Tensor condition, Scalar self, Tensor other) -> Tensor
    where.Scalar(Tensor condition, Scalar self, Scalar other) -> Tensor
    """
    out = out_max_dtype()
    return ops.where(_as_bool(condition), as_tensor(self, out), as_tensor(other, out))


@lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(self: TensorValue, mask: TensorValue, value: Operand) -> TensorValue:
    """masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor
    masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor
    """
    return ops.where(_as_bool(mask), as_tensor(value, self.dtype), self)


# -- assertions ----------------------------------------------------------------


@lowering(aten._assert_async.msg)
def assert_async(self: TensorValue, assert_msg: str) -> None:
    """_assert_async.msg(Tensor self, str assert_msg) -> ()"""
    # Decompositions assert on values (one_hot's class range): raised after
    # the call, as the runtime checks of index ops are.
    fail_when(ops.logical_not(as_tensor(self, DType.bool)), "RuntimeError", assert_msg)
