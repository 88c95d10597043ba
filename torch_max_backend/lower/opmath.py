"""Half-precision math computed in float32 and rounded once, as torch does.

torch's kernels compute each float16 or bfloat16 elementwise function in
float32 (its "opmath" type) and round the result to the tensor's dtype.
MAX's half-precision kernels compute in half precision: its float16 tanh was
up to 137 ulps off (a third of 20,000 values differed from eager), pow 2.5-6
ulps, and expm1 and sinh overflowed their intermediates to inf. A lowering
wrapped with ``opmath`` gets float32 tensors and a float32 ``out_max_dtype``
for such a node, and its results are rounded to the node's dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..dtypes import to_max_dtype
from .bfloat16_rounding import cast_to
from .context import computing_in, current

F = TypeVar("F", bound=Callable[..., Any])

# The dtypes torch computes in float32 and rounds back to.
HALF = (torch.float16, torch.bfloat16)
_HALF_MAX = (DType.float16, DType.bfloat16)


def _widened(value: object) -> object:
    # Lifted Python scalars (ScalarArg) are weakly typed: promotion inside the
    # lowering gives them the tensors' float32.
    if isinstance(value, TensorValue) and value.dtype in _HALF_MAX:
        return ops.cast(value, DType.float32)
    return value


def _rounded(result: object, dtype: DType) -> object:
    if isinstance(result, TensorValue) and result.dtype == DType.float32:
        return cast_to(result, dtype)
    if isinstance(result, (tuple, list)):
        return type(result)(_rounded(r, dtype) for r in result)
    return result


def opmath(fn: F) -> F:
    """``fn`` built in float32 for a float16 or bfloat16 node."""

    @functools.wraps(fn)
    def lower(*args: Any, **kwargs: Any) -> Any:
        meta = current().out_meta
        if isinstance(meta, (list, tuple)) and meta:
            meta = meta[0]
        dtype = meta.dtype if isinstance(meta, torch.Tensor) else None
        if dtype not in HALF:
            return fn(*args, **kwargs)
        with computing_in(torch.float32):
            result = fn(
                *(_widened(a) for a in args),
                **{k: _widened(v) for k, v in kwargs.items()},
            )
        return _rounded(result, to_max_dtype(dtype))

    return lower  # type: ignore[return-value]


def accumulated(
    product: Callable[..., TensorValue], first: TensorValue, *rest: TensorValue | None
) -> TensorValue:
    """``product`` of half-precision operands on the CPU, taken in float32
    and rounded once: MAX's CPU batched matmul, convolutions and average
    pooling add float16/bfloat16 terms in half precision (5-8 ulps of the
    output's scale off, where torch's are within half an ulp; its 2-d matmul
    already accumulates in float32). GPUs keep their half-precision kernels.
    An operand may be None (a convolution without bias): passed as it is."""
    operands = (first, *rest)
    dtype = first.dtype
    if dtype not in _HALF_MAX or not current().device.is_cpu():
        return product(*operands)
    return cast_to(product(*(_widened(o) for o in operands)), dtype)
