"""The public op registry: exact ATen ``OpOverload`` -> function building MAX values.

Lowerings are registered with ``@lowering(aten.x.overload, ...)``. Users may add
or override entries at run time through ``MAPPING_TORCH_ATEN_TO_MAX``; the next
compile reads the registry afresh, including the decomposition table derived
from it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._ops import OpOverload, OpOverloadPacket

LoweringFn = Callable[..., Any]
F = TypeVar("F", bound=LoweringFn)

# Attribute names a lowering may carry; user functions need none of them.
LIFTS_SCALARS = "_max_lifts_scalars"
SUPPORTS = "_max_supports"
RANDOM = "_max_random"
STRATEGIES = "_max_strategies"
CHOOSER = "_max_chooser"

# A capability check: given the FX node, the reason it is not covered, or None.
SupportsFn = Callable[[torch.fx.Node], str | None]


class LoweringRegistry(MutableMapping[OpOverload, LoweringFn]):
    """A mapping keyed by exact ``OpOverload``.

    An ``OpOverloadPacket`` key (``aten.tanh``) is accepted for convenience and
    means its ``.default`` overload, or, when setting, every overload of the
    packet that is already registered (``.default`` if none is). Keys are
    therefore always of one kind.
    """

    def __init__(self) -> None:
        self._table: dict[OpOverload, LoweringFn] = {}
        # Lowerings of operators another library defines when imported
        # (``"transformers::grouped_mm_fallback"``), by qualified name: an
        # entry joins the table once its operator exists.
        self._deferred: dict[str, LoweringFn] = {}

    def defer(self, qualified_name: str, fn: LoweringFn) -> None:
        """Register ``fn`` for the default overload of ``qualified_name``
        (``"namespace::name"``), an operator that exists only once the
        library defining it is imported; importing it here would cost every
        user of the backend that library's import time."""
        if "::" not in qualified_name or "." in qualified_name:
            raise ValueError(
                f"a deferred lowering names an operator as 'namespace::name', "
                f"got {qualified_name!r}"
            )
        if qualified_name in self._deferred:
            raise ValueError(f"{qualified_name} is registered twice")
        self._deferred[qualified_name] = fn

    def deferred_names(self) -> tuple[str, ...]:
        """The operators of other libraries that have a lowering, loaded or not."""
        return tuple(sorted(self._deferred))

    def deferred(self, qualified_name: str) -> LoweringFn:
        """The lowering registered for another library's operator by name."""
        return self._deferred[qualified_name]

    def lowers_by_name(self, op: OpOverload) -> bool:
        """Whether ``op`` is another library's operator with a lowering
        registered by name (``defer``)."""
        return op._overloadname == "default" and op._schema.name in self._deferred

    def _join_deferred(self, op: OpOverload) -> None:
        """Move a deferred lowering of ``op`` into the table (users' own
        entries for it win)."""
        if op not in self._table and self.lowers_by_name(op):
            self._table[op] = self._deferred[op._schema.name]

    def _join_loaded(self) -> None:
        for name in self._deferred:
            namespace, _, op_name = name.partition("::")
            packet = getattr(getattr(torch.ops, namespace), op_name, None)
            if packet is not None:
                self._join_deferred(packet.default)

    def _overloads(self, key: object, *, setting: bool) -> list[OpOverload]:
        if isinstance(key, OpOverload):
            if not setting:
                self._join_deferred(key)
            return [key]
        if isinstance(key, OpOverloadPacket):
            if setting:
                registered = [
                    getattr(key, name)
                    for name in key.overloads()
                    if getattr(key, name) in self._table
                ]
                if registered:
                    return registered
            if "default" not in key.overloads():
                raise KeyError(
                    f"{key} has no .default overload; use an exact overload "
                    f"such as {key}.{key.overloads()[0]}"
                )
            return [key.default]
        raise TypeError(
            "MAPPING_TORCH_ATEN_TO_MAX keys are ATen operators such as "
            f"torch.ops.aten.add.Tensor, got {type(key).__name__} {key!r}"
        )

    def __getitem__(self, key: object) -> LoweringFn:
        return self._table[self._overloads(key, setting=False)[0]]

    def __setitem__(self, key: object, fn: object) -> None:
        # Typed ``object``: this is user input, validated here with a clear error.
        if not callable(fn):
            raise TypeError(f"the lowering for {key} must be callable, got {fn!r}")
        for op in self._overloads(key, setting=True):
            self._table[op] = fn

    def __delitem__(self, key: object) -> None:
        for op in self._overloads(key, setting=False):
            del self._table[op]
            if self.lowers_by_name(op):
                del self._deferred[op._schema.name]

    def __contains__(self, key: object) -> bool:
        try:
            return self._overloads(key, setting=False)[0] in self._table
        except (KeyError, TypeError):
            return False

    def __iter__(self) -> Iterator[OpOverload]:
        self._join_loaded()
        return iter(list(self._table))

    def __len__(self) -> int:
        self._join_loaded()
        return len(self._table)

    def __repr__(self) -> str:
        return f"<MAPPING_TORCH_ATEN_TO_MAX: {len(self)} ATen operators>"


MAPPING_TORCH_ATEN_TO_MAX = LoweringRegistry()


def lowering(
    *ops: object,  # user input: checked below with a clear error
    lift_scalars: bool = True,
    supports: SupportsFn | None = None,
    random: bool = False,
) -> Callable[[F], F]:
    """Register the decorated function as the MAX lowering of each exact overload.

    Args:
        ops: exact overloads, never packets, and each registered once; or
            the qualified name (``"namespace::name"``) of another library's
            operator, registered when that library is loaded.
        lift_scalars: Python numbers in ``Scalar`` arguments reach the function
            as ``ScalarArg`` graph inputs, so graphs differing only in such
            constants share one compiled artifact. Off for ops whose scalars
            decide shapes or need their value at build time.
        supports: capability check for a lowering that covers only part of
            its op; returns why a node is not covered, or None.
        random: the op draws random numbers; its graph then takes a fresh
            seed from torch's generator at every call.
    """

    def register(fn: F) -> F:
        for op in ops:
            if isinstance(op, str):
                MAPPING_TORCH_ATEN_TO_MAX.defer(op, fn)
                continue
            if not isinstance(op, OpOverload):
                raise TypeError(f"@lowering takes exact overloads, got {op!r}")
            if op in MAPPING_TORCH_ATEN_TO_MAX:
                raise ValueError(f"{op} is registered twice")
            MAPPING_TORCH_ATEN_TO_MAX[op] = fn
        setattr(fn, LIFTS_SCALARS, lift_scalars)
        setattr(fn, SUPPORTS, supports)
        setattr(fn, RANDOM, random)
        return fn

    return register


@dataclass(frozen=True)
class Strategy:
    """One way of lowering an op: tried in priority order, the first whose
    ``supports`` passes on a node builds it.

    ``supports`` returns why the strategy does not fit the node, or None; its
    docstring's first line says what it covers (docs/ops.md prints it).
    """

    name: str
    lower: LoweringFn
    supports: SupportsFn | None = None

    def reason(self, node: torch.fx.Node) -> str | None:
        return None if self.supports is None else self.supports(node)


# Picks one of the candidates that fit a node (at least two, in rank order).
Chooser = Callable[[torch.fx.Node, Sequence[Strategy]], Strategy]


def lowering_strategies(
    *ops: object,
    candidates: Sequence[Strategy],
    supports: SupportsFn | None = None,
    lift_scalars: bool = True,
    choose: Chooser | None = None,
) -> LoweringFn:
    """Register one lowering of ``ops`` that picks among ``candidates``.

    ``supports`` checks what the op as a whole covers; a node it passes is
    built by the first candidate (in the order given) whose own check passes,
    or, with ``choose``, by the one it picks among those that fit (a
    measurement, a setting). A node no candidate fits is refused with each
    candidate's reason.
    """
    if not candidates:
        raise ValueError("lowering_strategies needs at least one candidate")
    ranked = tuple(candidates)

    def check(node: torch.fx.Node) -> str | None:
        if supports is not None:
            reason = supports(node)
            if reason is not None:
                return reason
        if any(s.reason(node) is None for s in ranked):
            return None
        return "; ".join(f"{s.name}: {s.reason(node)}" for s in ranked)

    check.__doc__ = supports.__doc__ if supports is not None else None
    # With a last candidate that fits every node, the op is covered whole.
    check.covers_all = supports is None and ranked[-1].supports is None  # type: ignore[attr-defined]

    def lower(*args: Any, **kwargs: Any) -> Any:
        from .context import current

        strategy = chosen_strategy(ranked, current().node, choose)
        assert strategy is not None  # the capability check ran first
        return strategy.lower(*args, **kwargs)

    lower.__name__ = lower.__qualname__ = ranked[0].lower.__name__
    lower.__doc__ = ranked[0].lower.__doc__
    lower.__module__ = ranked[0].lower.__module__
    lowering(*ops, lift_scalars=lift_scalars, supports=check)(lower)
    setattr(lower, STRATEGIES, ranked)
    setattr(lower, CHOOSER, choose)
    return lower


def chosen_strategy(
    ranked: Sequence[Strategy], node: torch.fx.Node, choose: Chooser | None = None
) -> Strategy | None:
    if choose is None:
        return next((s for s in ranked if s.reason(node) is None), None)
    fitting = [s for s in ranked if s.reason(node) is None]
    if not fitting:
        return None
    return fitting[0] if len(fitting) == 1 else choose(node, fitting)


def strategies_of(fn: LoweringFn) -> tuple[Strategy, ...]:
    """The ranked candidates of a lowering registered with several, else ()."""
    return tuple(getattr(fn, STRATEGIES, ()))


def strategy_for(fn: LoweringFn, node: torch.fx.Node) -> str | None:
    """The name of the strategy that builds ``node``, for a lowering with several."""
    chosen = chosen_strategy(strategies_of(fn), node, getattr(fn, CHOOSER, None))
    return None if chosen is None else chosen.name


def lifts_scalars(fn: LoweringFn) -> bool:
    return bool(getattr(fn, LIFTS_SCALARS, False))


def draws_random(fn: LoweringFn) -> bool:
    return bool(getattr(fn, RANDOM, False))


def unsupported_reason(fn: LoweringFn, node: torch.fx.Node) -> str | None:
    check: SupportsFn | None = getattr(fn, SUPPORTS, None)
    return None if check is None else check(node)


# Non-core ops that AOTAutograd leaves in graphs and that PyTorch can
# decompose into core ops (training-mode batch norm and its backward).
_aten = torch.ops.aten
_EXTRA_DECOMPOSITIONS = [
    _aten._native_batch_norm_legit_functional.default,
    _aten.native_batch_norm_backward.default,
    # Non-core ops whose torch decompositions end in ops we lower (others'
    # end in prims, and are lowered in their own right where we do).
    _aten.addmv.default,
    _aten.as_strided_copy.default,
    _aten.bucketize.Tensor,
    _aten.diagonal_scatter.default,
    _aten.dist.default,
    _aten.ldexp.Tensor,
    _aten.narrow_copy.default,
    _aten.new_empty_strided.default,
    _aten.permute_copy.default,
    _aten.unbind_copy.int,
    _aten.unfold.default,
    _aten.unfold_copy.default,
    _aten.view_copy.default,
]


@functools.cache
def core_and_extra_decompositions() -> dict[OpOverload, Callable[..., Any]]:
    """torch's core ATen decompositions and ours, read once per process:
    materializing torch's table walks every operator's registrations
    (0.1-0.2 s a call, which every compile and every traced test case paid)."""
    table = dict(core_aten_decompositions().items())
    table.update(get_decompositions(_EXTRA_DECOMPOSITIONS))
    return {op: fn for op, fn in table.items() if isinstance(op, OpOverload)}


# Our own rewrites of ops into ops we lower, registered by the families.
_OWN_DECOMPOSITIONS: dict[OpOverload, Callable[..., Any]] = {}


def decomposition(op: OpOverload) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as ``op``'s rewrite while tracing; ``fn`` returns
    NotImplemented to leave a call as it is."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if op in _OWN_DECOMPOSITIONS:
            raise ValueError(f"{op} has a decomposition already")
        _OWN_DECOMPOSITIONS[op] = fn
        return fn

    return register


def decomposition_table() -> dict[OpOverload, Callable[..., Any]]:
    """Core ATen decompositions (and a few extra, and ours) minus every op
    we lower.

    Filtered afresh at each compile so that user registrations take effect.
    """
    from .families import register_families

    register_families()
    table = {**core_and_extra_decompositions(), **_OWN_DECOMPOSITIONS}
    return {op: fn for op, fn in table.items() if op not in MAPPING_TORCH_ATEN_TO_MAX}
