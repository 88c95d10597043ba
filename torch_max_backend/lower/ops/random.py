"""Random ops: rand, randn (and their _like forms), randperm, dropout, and the
draws a model makes into tensors of its own (uniform_, normal_, bernoulli_,
exponential_, torch.normal), on MAX's random generators.

Every graph with a random op takes a fresh seed drawn from torch's default
generator at each call (see graph_builder.SEED): results change from call to
call, and ``torch.manual_seed`` makes a run reproducible. The streams are
MAX's, so values differ from eager PyTorch's; their distributions do not.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from max.dtype import DType
from max.graph import TensorType, TensorValue, ops

from ..checks import fail_when
from ..context import current
from ..kit import schema_args
from ..registry import lowering
from ..scalars import as_tensor, out_max_dtype
from ..shapes import SizeLike

aten = torch.ops.aten


def _like(size: Sequence[SizeLike], dtype: DType | None = None) -> TensorType:
    return TensorType(dtype or out_max_dtype(), list(size), current().device)


@lowering(aten.rand.default, random=True)
def rand(
    size: Sequence[SizeLike],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """rand(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return ops.random.uniform(_like(size), range=(0, 1))


@lowering(aten.randn.default, random=True)
def randn(
    size: Sequence[SizeLike],
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """randn(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    return ops.random.gaussian(_like(size), mean=0.0, std=1.0)


@lowering(aten.rand_like.default, random=True)
def rand_like(
    self: TensorValue,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> TensorValue:
    """rand_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return ops.random.uniform(_like(list(self.shape)), range=(0, 1))


@lowering(aten.randn_like.default, random=True)
def randn_like(
    self: TensorValue,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> TensorValue:
    """randn_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"""
    return ops.random.gaussian(_like(list(self.shape)), mean=0.0, std=1.0)


@lowering(aten.randperm.default, random=True)
def randperm(
    n: int,
    *,
    dtype: torch.dtype | None = torch.int64,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
) -> TensorValue:
    """randperm(SymInt n, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor"""
    # Sorting n independent uniform keys gives a uniformly random permutation.
    keys = _uniform([n], DType.float32)
    return ops.cast(ops.argsort(keys), out_max_dtype())


@lowering(aten.native_dropout.default, random=True)
def native_dropout(
    input: TensorValue, p: float, train: bool | None
) -> tuple[TensorValue, TensorValue]:
    """native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)"""
    if train is False or p == 0:
        keep = ops.broadcast_to(as_tensor(True, DType.bool), list(input.shape))
        return input, keep
    if p >= 1:
        keep = ops.broadcast_to(as_tensor(False, DType.bool), list(input.shape))
        return ops.mul(input, as_tensor(0, input.dtype)), keep
    draw = _uniform(list(input.shape), DType.float32)
    keep = ops.greater(as_tensor(1 - p, DType.float32), draw)
    scale = as_tensor(1 / (1 - p), input.dtype)
    kept = ops.where(keep, ops.mul(input, scale), as_tensor(0, input.dtype))
    return kept, keep


def _drawn_in(dtype: DType) -> DType:
    """The dtype MAX draws in for a result of ``dtype``: float32 for the
    half-precision ones, whose values are then rounded once."""
    return dtype if dtype in (DType.float32, DType.float64) else DType.float32


def _uniform(shape: Sequence[SizeLike], dtype: DType) -> TensorValue:
    """Draws from [0, 1) in the dtype ``_drawn_in(dtype)``."""
    return ops.random.uniform(_like(shape, _drawn_in(dtype)), range=(0, 1))


def _standard_normal(shape: Sequence[SizeLike], dtype: DType) -> TensorValue:
    return ops.random.gaussian(_like(shape, _drawn_in(dtype)), mean=0.0, std=1.0)


def _no_generator(node: torch.fx.Node) -> str | None:
    """Draws from the default generator (a torch.Generator argument: PyTorch)."""
    if node.kwargs.get("generator") is not None:
        return "a torch.Generator of the caller's (MAX draws from the graph's seed)"
    return None


def _argument(node: torch.fx.Node, name: str, default: float) -> object:
    """The argument the schema names ``name``, positional or keyword."""
    return schema_args(node).get(name, default)


def _from_below_to(node: torch.fx.Node) -> str | None:
    """Float ``from`` <= ``to``, the default generator (else PyTorch, which
    raises its own error for a range the wrong way round)."""
    low, high = _argument(node, "from", 0.0), _argument(node, "to", 1.0)
    if not isinstance(low, (int, float)) or not isinstance(high, (int, float)):
        return "a range that is not two numbers"
    if low > high:
        return f"from={low} > to={high} (eager refuses it)"
    return _no_generator(node)


@lowering(aten.uniform.default, random=True, supports=_from_below_to)
def uniform(
    self: TensorValue, from_: float = 0.0, to: float = 1.0, *, generator: None = None
) -> TensorValue:
    """uniform(Tensor self, float from=0., float to=1., *, Generator? generator=None) -> Tensor"""
    # torch's own form: from + (to - from) * u, the width computed here.
    drawn = _uniform(list(self.shape), self.dtype)
    width = as_tensor(float(to) - float(from_), drawn.dtype)
    value = ops.add(ops.mul(drawn, width), as_tensor(float(from_), drawn.dtype))
    return ops.cast(value, self.dtype)


def _std_not_negative(node: torch.fx.Node) -> str | None:
    """A float std >= 0, the default generator (else PyTorch, which raises
    its own error)."""
    std = _argument(node, "std", 1.0)
    if isinstance(std, (int, float)) and std < 0:
        return f"std={std} < 0 (eager refuses it)"
    return _no_generator(node)


@lowering(aten.normal_functional.default, random=True, supports=_std_not_negative)
def normal_functional(
    self: TensorValue, mean: float = 0.0, std: float = 1.0, *, generator: None = None
) -> TensorValue:
    """normal_functional(Tensor self, float mean=0., float std=1., *, Generator? generator=None) -> Tensor"""
    return _normal_about(float(mean), float(std), list(self.shape), self.dtype)


def _normal_about(
    mean: float | TensorValue, std: float, shape: list, dtype: DType
) -> TensorValue:
    """mean + std * z in ``shape``, z standard normal, as ``dtype``."""
    drawn = _standard_normal(shape, dtype)
    scaled = ops.mul(drawn, as_tensor(std, drawn.dtype))
    return ops.cast(ops.add(scaled, as_tensor(mean, drawn.dtype)), dtype)


def _scaled_normal(mean: TensorValue, std: TensorValue) -> TensorValue:
    """mean + std * z, z standard normal, in the broadcast shape of both;
    a negative std refuses the call after it, as eager raises."""
    dtype = out_max_dtype()
    mean, std = ops.cast(mean, _drawn_in(dtype)), ops.cast(std, _drawn_in(dtype))
    # A negative or NaN std: eager raises (after the call here).
    fail_when(
        ops.logical_not(ops.greater_equal(std, as_tensor(0, std.dtype))),
        "RuntimeError",
        "normal expects all elements of std >= 0.0",
    )
    shape = list(ops.add(mean, std).shape)  # the broadcast shape, read only
    drawn = _standard_normal(shape, dtype)
    return ops.cast(ops.add(mean, ops.mul(std, drawn)), dtype)


@lowering(aten.normal.Tensor_float, random=True, supports=_std_not_negative)
def normal_tensor_float(
    mean: TensorValue, std: float = 1.0, *, generator: None = None
) -> TensorValue:
    """normal.Tensor_float(Tensor mean, float std=1., *, Generator? generator=None) -> Tensor"""
    return _normal_about(mean, float(std), list(mean.shape), out_max_dtype())


@lowering(aten.normal.float_Tensor, random=True, supports=_no_generator)
def normal_float_tensor(
    mean: float, std: TensorValue, *, generator: None = None
) -> TensorValue:
    """normal.float_Tensor(float mean, Tensor std, *, Generator? generator=None) -> Tensor"""
    return _scaled_normal(as_tensor(float(mean), std.dtype), std)


@lowering(aten.normal.Tensor_Tensor, random=True, supports=_no_generator)
def normal_tensor_tensor(
    mean: TensorValue, std: TensorValue, *, generator: None = None
) -> TensorValue:
    """normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator? generator=None) -> Tensor"""
    return _scaled_normal(mean, std)


def _probability(node: torch.fx.Node) -> str | None:
    """A float p in [0, 1], the default generator (else PyTorch, which
    raises its own error)."""
    p = _argument(node, "p", 0.5)
    if not isinstance(p, (int, float)) or not 0 <= p <= 1:
        return f"p={p} outside [0, 1] (eager refuses it)"
    return _no_generator(node)


@lowering(aten.bernoulli.p, random=True, supports=_probability)
def bernoulli_p(self: TensorValue, p: float, *, generator: None = None) -> TensorValue:
    """bernoulli.p(Tensor self, float p, *, Generator? generator=None) -> Tensor"""
    drawn = _uniform(list(self.shape), DType.float32)
    hit = ops.greater(as_tensor(float(p), DType.float32), drawn)  # u < p
    return ops.cast(hit, self.dtype)


def _positive_rate(node: torch.fx.Node) -> str | None:
    """A float rate lambd > 0, the default generator (else PyTorch, which
    raises its own error)."""
    rate = _argument(node, "lambd", 1.0)
    if not isinstance(rate, (int, float)) or rate <= 0:
        return f"lambd={rate} <= 0 (eager refuses it)"
    return _no_generator(node)


@lowering(aten.exponential.default, random=True, supports=_positive_rate)
def exponential(
    self: TensorValue, lambd: float = 1.0, *, generator: None = None
) -> TensorValue:
    """exponential(Tensor self, float lambd=1., *, Generator? generator=None) -> Tensor"""
    # Inverse transform: -log(1 - u) / lambd, with 1 - u in (0, 1].
    drawn = _uniform(list(self.shape), self.dtype)
    tail = ops.sub(as_tensor(1.0, drawn.dtype), drawn)
    value = ops.mul(ops.log(tail), as_tensor(-1.0 / float(lambd), drawn.dtype))
    return ops.cast(value, self.dtype)
