"""The ``_foreach_*`` ops that optimizers emit: one lowering per list element.

Each overload maps onto the lowering of its single-tensor op (``_foreach_add.List``
onto ``add.Tensor``, ``.Scalar`` onto ``add.Scalar``, ...), built once per
element with that element's own output meta, so dtypes follow torch's rules
element by element. Ops with no single-tensor twin in the registry are
composed here (addcmul, addcdiv, lerp, norm, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from max.graph import TensorValue, ops

from ... import logs
from ..context import list_element
from ..products import product
from ..registry import MAPPING_TORCH_ATEN_TO_MAX, lowering
from ..scalars import Operand, as_tensor, out_max_dtype
from .reduction import linalg_vector_norm, power_sum, torch_max

aten = torch.ops.aten
_log = logs.get_logger("compile")

Elementwise = Callable[..., TensorValue]


def _each(count: int, build: Callable[[int], TensorValue]) -> list[TensorValue]:
    results = []
    for i in range(count):
        with list_element(i):
            results.append(build(i))
    return results


def _foreach_op(name: str, overload: str) -> Any:
    """aten._foreach_<name>.<overload>, or None where this torch lacks it: an
    older torch (the 2.11 of a GPU image, say) has fewer foreach ops, no
    graph it traces holds the missing ones, and the other lowerings stand."""
    packet = getattr(aten, f"_foreach_{name}", None)
    op = getattr(packet, overload, None) if packet is not None else None
    if op is None:
        _log.debug(
            "torch %s has no aten._foreach_%s.%s", torch.__version__, name, overload
        )
    return op


def _lowering_if(name: str, overload: str, **options: bool) -> Callable[[Any], Any]:
    """``@lowering`` of a foreach op where this torch has it."""
    op = _foreach_op(name, overload)
    return (lambda fn: fn) if op is None else lowering(op, **options)


def _register(
    name: str, overload: str, build: Callable[..., list[TensorValue]]
) -> None:
    op = _foreach_op(name, overload)
    if op is None:
        return
    # One build may serve several overloads: its docstring lists each schema.
    schema = str(op._schema).removeprefix("aten::")
    build.__name__ = f"foreach_{name}"
    build.__doc__ = f"{build.__doc__}\n{schema}" if build.__doc__ else schema
    lowering(op)(build)


def _unary(name: str, fn: Elementwise) -> None:
    def build(self: Sequence[TensorValue]) -> list[TensorValue]:
        return _each(len(self), lambda i: fn(self[i]))

    _register(name, "default", build)


def _binary(name: str, overload: str, fn: Elementwise) -> None:
    # List: other[i]; ScalarList: scalars[i]; Scalar and Tensor: one operand.
    def build(
        self: Sequence[TensorValue], other: Any, *args: Any, **kwargs: Any
    ) -> list[TensorValue]:
        def one(i: int) -> TensorValue:
            operand = other[i] if overload in ("List", "ScalarList") else other
            return fn(self[i], operand, *args, **kwargs)

        return _each(len(self), one)

    _register(name, overload, build)


def _lowered(op: torch._ops.OpOverload) -> Elementwise:
    # Looked up when the graph is built: the single-tensor op may be
    # registered after this module, or overridden by the user.
    def call(*args: Any, **kwargs: Any) -> TensorValue:
        return MAPPING_TORCH_ATEN_TO_MAX[op](*args, **kwargs)

    return call


_UNARY = [
    "abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "exp", "expm1",
    "floor", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round",
    "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
]  # fmt: skip
for _name in _UNARY:
    _unary(_name, _lowered(getattr(aten, _name).default))


def _erfc(x: TensorValue) -> TensorValue:
    x = as_tensor(x, out_max_dtype())
    return ops.sub(as_tensor(1, x.dtype), ops.erf(x))


def _frac(x: TensorValue) -> TensorValue:
    return ops.sub(x, ops.trunc(x))


_unary("erfc", _erfc)
_unary("frac", _frac)
_unary("zero", lambda x: ops.broadcast_to(as_tensor(0, x.dtype), list(x.shape)))
_unary("clone", lambda x: x)

for _name in ("add", "sub", "mul", "div"):
    _packet = getattr(aten, _name)
    _binary(_name, "List", _lowered(_packet.Tensor))
    _binary(_name, "Scalar", _lowered(_packet.Scalar))
    _binary(_name, "ScalarList", _lowered(_packet.Scalar))
    if _name != "sub":  # torch has no _foreach_sub.Tensor
        _binary(_name, "Tensor", _lowered(_packet.Tensor))

for _overload in ("List", "Scalar", "ScalarList"):
    _binary("maximum", _overload, _lowered(aten.maximum.default))
    _binary("minimum", _overload, _lowered(aten.minimum.default))
    _binary("clamp_min", _overload, _lowered(aten.maximum.default))
    _binary("clamp_max", _overload, _lowered(aten.minimum.default))
    _binary("pow", _overload, _lowered(aten.pow.Tensor_Tensor))


@_lowering_if("pow", "ScalarAndTensor")
def foreach_pow_scalar_and_tensor(
    self: Operand, exponent: Sequence[TensorValue]
) -> list[TensorValue]:
    """_foreach_pow.ScalarAndTensor(Scalar self, Tensor[] exponent) -> Tensor[]"""
    pow_scalar = _lowered(aten.pow.Scalar)
    return _each(len(exponent), lambda i: pow_scalar(self, exponent[i]))


@_lowering_if("copy", "default")
def foreach_copy(
    self: Sequence[TensorValue], src: Sequence[TensorValue], non_blocking: bool = False
) -> list[TensorValue]:
    """_foreach_copy(Tensor[] self, Tensor[] src, bool non_blocking=False) -> Tensor[] self_out"""
    return _each(
        len(self),
        lambda i: ops.broadcast_to(
            as_tensor(src[i], self[i].dtype), list(self[i].shape)
        ),
    )


def _addc(
    combine: Callable[[TensorValue, TensorValue], TensorValue], name: str
) -> None:
    def term(
        x: TensorValue, t1: TensorValue, t2: TensorValue, value: Operand
    ) -> TensorValue:
        dt = x.dtype
        return ops.add(
            x,
            ops.mul(
                as_tensor(value, dt), combine(as_tensor(t1, dt), as_tensor(t2, dt))
            ),
        )

    def build(
        self: Sequence[TensorValue],
        tensor1: Sequence[TensorValue],
        tensor2: Sequence[TensorValue],
        value: Any = 1,
    ) -> list[TensorValue]:
        def one(i: int) -> TensorValue:
            v = value
            if isinstance(value, (list, tuple)):
                v = value[i]
            elif isinstance(value, TensorValue) and value.rank == 1:
                v = value[i]  # .Tensor: one scalar per element, in a 1-d tensor
            return term(self[i], tensor1[i], tensor2[i], v)

        return _each(len(self), one)

    for overload in ("Scalar", "ScalarList", "Tensor"):
        _register(name, overload, build)


_addc(ops.mul, "addcmul")
_addc(ops.div, "addcdiv")


def _lerp(overload: str) -> None:
    def build(
        self: Sequence[TensorValue], tensors1: Sequence[TensorValue], weight: Any
    ) -> list[TensorValue]:
        def one(i: int) -> TensorValue:
            w = weight[i] if overload in ("List", "ScalarList") else weight
            x = self[i]
            return ops.add(x, ops.mul(as_tensor(w, x.dtype), ops.sub(tensors1[i], x)))

        return _each(len(self), one)

    _register("lerp", overload, build)


for _overload in ("List", "Scalar", "ScalarList"):
    _lerp(_overload)


# ``ord`` picks the algorithm (0, inf, ...), so it stays a build-time number.
@_lowering_if("norm", "Scalar", lift_scalars=False)
def foreach_norm(
    self: Sequence[TensorValue], ord: float = 2, dtype: torch.dtype | None = None
) -> list[TensorValue]:
    """_foreach_norm.Scalar(Tensor[] self, Scalar ord=2, ScalarType? dtype=None) -> Tensor[]"""
    return _each(len(self), lambda i: linalg_vector_norm(self[i], ord, dtype=dtype))


@_lowering_if("powsum", "Scalar", lift_scalars=False)
def foreach_powsum(
    self: Sequence[TensorValue], ord: float = 2, dtype: torch.dtype | None = None
) -> list[TensorValue]:
    """_foreach_powsum.Scalar(Tensor[] self, Scalar ord=2, ScalarType? dtype=None) -> Tensor[]"""
    return _each(
        len(self), lambda i: as_tensor(power_sum(self[i], ord), out_max_dtype())
    )


@_lowering_if("max", "default")
def foreach_max(self: Sequence[TensorValue]) -> list[TensorValue]:
    """_foreach_max(Tensor[] self) -> Tensor[]"""
    return _each(
        len(self), lambda i: torch_max(ops.reshape(self[i], [-1]), 0).reshape([])
    )


@_lowering_if("mm", "default")
def foreach_mm(
    self: Sequence[TensorValue], mat2: Sequence[TensorValue]
) -> list[TensorValue]:
    """_foreach_mm(Tensor[] self, Tensor[] mat2) -> Tensor[]"""
    return _each(len(self), lambda i: product(self[i], mat2[i]))
