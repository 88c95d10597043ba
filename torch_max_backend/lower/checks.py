"""Inputs a graph refuses at run time, with the error eager PyTorch raises.

Some values make eager PyTorch raise where a MAX kernel would read or write
outside a tensor (an index out of range: MAX's gathers and scatters by index
vectors do not check) or stop the process (an integer division by zero traps
on x86). A lowering that meets such an operand makes it harmless for the
kernel (an index 0, a divisor 1) and records a check: a flag the graph
computes ("some index was out of range") with the error eager gives. The
graph returns every flag in one output; the runtime raises the first check
whose flag is set, after the call (plan.RuntimeCheck). An index whose values PyTorch computed when the
graph was planned (passes/folding.py) and found in range needs no check:
each costs MAX a reduction kernel to compile (about 0.7 s on a 2-core AMD
EPYC, max 26.7; bicubic interpolation alone indexes 16 times).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from max.dtype import DType
from max.graph import Dim, TensorValue, ops
from max.graph.ops.reduction import max as reduce_max

from ..plan import RuntimeCheck
from .context import current
from .scalars import Operand, as_tensor
from .shapes import size_value, static_size


class Checks:
    """The checks of the graph being built and their flags (bool [1] each)."""

    def __init__(self) -> None:
        self.checks: list[RuntimeCheck] = []
        self.flags: list[TensorValue] = []
        # A check recorded once, by key (one position checked for each layer).
        self.keyed: dict[object, TensorValue] = {}

    def output(self) -> TensorValue | None:
        """One bool per check, in order; None when nothing is checked."""
        if not self.flags:
            return None
        return ops.concat(self.flags, axis=0) if len(self.flags) > 1 else self.flags[0]


_CURRENT: ContextVar[Checks | None] = ContextVar("max_runtime_checks", default=None)


@contextlib.contextmanager
def collecting(checks: Checks) -> Iterator[None]:
    """Checks recorded inside are ``checks``'."""
    token = _CURRENT.set(checks)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def fail_when(
    bad: TensorValue, error: str, message: str, key: object = None
) -> TensorValue:
    """After the call, raise ``error`` (IndexError or RuntimeError) with
    ``message``, naming the op and node, when any element of ``bad`` is true.
    Returns that condition (bool, shape [1]). A check with the ``key`` of one
    recorded before is that one. Outside a graph build (nothing collecting)
    nothing is raised."""
    checks = _CURRENT.get()
    if checks is not None and key is not None and key in checks.keyed:
        return checks.keyed[key]
    if all(static_size(d) == 1 for d in bad.shape):
        # One element is its own answer: a reduction would be a kernel launch
        # of its own (about 10 us each in a decode step), where this reshape
        # fuses into whatever computed it.
        any_bad = ops.reshape(bad, [1])
    else:
        flat = ops.cast(ops.reshape(bad, [-1]), DType.int32)
        any_bad = ops.greater(reduce_max(flat, axis=0), as_tensor(0, DType.int32))
    if checks is not None:
        node = current().node
        checks.flags.append(any_bad)
        checks.checks.append(
            RuntimeCheck(error, f"{message} ({node.target}, node {node.name})")
        )
        if key is not None:
            checks.keyed[key] = any_bad
    return any_bad


def unless_refused(
    refused: TensorValue | None, result: TensorValue, original: TensorValue
) -> TensorValue:
    """``result``, or ``original`` when a check ``refused`` the call: an op
    writing into a tensor in place leaves it as it was, as eager does."""
    if refused is None or original.rank == 0:
        return result
    return ops.where(ops.reshape(refused, [1] * original.rank), original, result)


def in_range(
    index: TensorValue,
    size: int | Dim,
    dim: int,
    error: str,
    wraps: bool,
    key: object = None,
    message: str | None = None,
    known: tuple[int, int] | None = None,
) -> tuple[TensorValue, TensorValue | None]:
    """``index`` (made int64) checked to address one of ``size`` positions
    along ``dim``, as eager checks it: negative positions count from the end
    where the op ``wraps`` them. An index outside reads position 0, and the
    call raises ``error`` (with ``message`` when given; ``key`` as
    ``fail_when``'s). Returns the index and whether the call is refused (None
    for an index with no elements, or one whose ``known`` least and greatest
    values are in range: the check would cost a reduction kernel's compile
    for nothing)."""
    index = ops.cast(index, DType.int64)
    if any(static_size(d) == 0 for d in index.shape):
        return index, None
    limit = static_size(size) if isinstance(size, Dim) else size
    lowest = -limit if wraps and limit is not None else 0
    proven = (
        known is not None
        and limit is not None
        and lowest <= known[0]
        and known[1] < limit
    )
    if proven and known[0] >= 0:
        return index, None
    zero = as_tensor(0, DType.int64)
    length = as_tensor(size if isinstance(size, int) else size_value(size), DType.int64)
    if wraps:
        index = ops.where(ops.greater(zero, index), ops.add(index, length), index)
    if proven:
        return index, None
    bad = ops.logical_or(ops.greater(zero, index), ops.greater_equal(index, length))
    message = message or f"index out of bounds for dimension {dim} with size {size}"
    refused = fail_when(bad, error, message, key)
    return ops.where(bad, zero, index), refused


def nonzero_divisor(divisor: TensorValue, operand: Operand) -> TensorValue:
    """An integer ``divisor`` (``operand`` promoted) with its zeros made 1;
    the call raises eager's RuntimeError (ZeroDivisionError) when there was
    one. A literal that is not zero needs no check."""
    if isinstance(operand, (int, float)) and operand != 0:
        return divisor
    zero = as_tensor(0, divisor.dtype)
    bad = ops.equal(divisor, zero)
    fail_when(bad, "RuntimeError", "ZeroDivisionError: integer division by zero")
    return ops.where(bad, as_tensor(1, divisor.dtype), divisor)
