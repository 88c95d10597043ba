"""Python scalars and torch's type promotion, in one place for every lowering."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..dtypes import to_max_dtype, to_torch_dtype
from .bfloat16_rounding import cast_to
from .context import current

Number = bool | int | float


@dataclass(frozen=True)
class ScalarArg:
    """A Python number of the user's code, passed to MAX as a rank-0 graph input.

    ``kind`` keeps the Python type so that promotion treats it as torch treats
    a wrapped number (weakly typed), whatever dtype carries it into the graph.
    """

    value: TensorValue
    kind: type

    def __post_init__(self) -> None:
        if self.kind not in (bool, int, float):
            raise TypeError(f"ScalarArg kind must be bool, int or float: {self.kind}")


Operand = TensorValue | ScalarArg | bool | int | float


def _wrapped_dtype(kind: type) -> torch.dtype:
    if kind is bool:
        return torch.bool
    if kind is int:
        return torch.int64
    return torch.get_default_dtype()


def _combine(
    higher: torch.dtype | None, lower: torch.dtype | None
) -> torch.dtype | None:
    # torch's combine_categories: a lower-priority group (0-dim tensors, then
    # Python numbers) only changes the dtype when it is of a higher category,
    # e.g. int tensor + float scalar -> float, float32 tensor + 2.0 -> float32.
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_floating_point or higher.is_complex:
        return higher
    if higher == torch.bool or lower.is_floating_point or lower.is_complex:
        return torch.promote_types(higher, lower)
    return higher


def _join(acc: torch.dtype | None, dtype: torch.dtype) -> torch.dtype:
    # At module level: a function nested in result_dtype would be wrapped
    # anew by the package's runtime type checks at every call (1.5 ms).
    return dtype if acc is None else torch.promote_types(acc, dtype)


def result_dtype(*operands: Operand) -> torch.dtype:
    """torch.result_type for graph values, 0-dim tensors and Python scalars."""
    dim: torch.dtype | None = None
    zero: torch.dtype | None = None
    wrapped: torch.dtype | None = None
    for x in operands:
        if isinstance(x, TensorValue):
            dtype = to_torch_dtype(x.dtype)
            if x.rank == 0:
                zero = _join(zero, dtype)
            else:
                dim = _join(dim, dtype)
        elif isinstance(x, ScalarArg):
            wrapped = _join(wrapped, _wrapped_dtype(x.kind))
        elif isinstance(x, (bool, int, float)):
            wrapped = _join(wrapped, _wrapped_dtype(type(x)))
        else:
            raise TypeError(f"not a tensor or number: {x!r}")
    result = _combine(dim, _combine(zero, wrapped))
    if result is None:
        raise TypeError("result_dtype needs at least one operand")
    return result


def as_tensor(x: Operand, dtype: DType) -> TensorValue:
    """``x`` as a graph value of ``dtype`` on the node's device."""
    if isinstance(x, ScalarArg):
        x = x.value
    if isinstance(x, TensorValue):
        if x.dtype == dtype:
            return x
        if dtype == DType.bool and x.dtype.is_float():
            # A float's truth is whether it is nonzero, NaN included (MAX's
            # cast and its ordered not_equal make NaN False).
            zero = ops.constant(0, x.dtype, device=x.device)
            return ops.logical_or(ops.not_equal(x, zero), ops.is_nan(x))
        return cast_to(x, dtype)
    return ops.constant(x, dtype, device=current().device)


def promote(*operands: Operand) -> list[TensorValue]:
    """Operands cast to their common torch result dtype."""
    dtype = to_max_dtype(result_dtype(*operands))
    return [as_tensor(x, dtype) for x in operands]


def out_max_dtype() -> DType:
    """MAX dtype of the current node's (first) output, from its FakeTensor."""
    return to_max_dtype(current().out_dtype)
