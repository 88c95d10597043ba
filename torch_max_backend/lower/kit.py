"""The lowering kit: reading an FX node's arguments and metadata, and the
capability conditions several families share.

Capability checks (``supports=``) see the FX node, not MAX values: they read
arguments (positional or keyword) and torch's fake tensors through these
helpers rather than each family indexing ``node.args`` its own way.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch

from .registry import SupportsFn

aten = torch.ops.aten


def node_arg(node: torch.fx.Node, index: int, name: str, default: Any) -> Any:
    """Argument ``index``/``name`` of an FX node, positional or keyword."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def tensor_meta(value: object) -> torch.Tensor | None:
    """The fake tensor an FX value carries (the first of a list), or None."""
    meta = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    if isinstance(meta, (list, tuple)):
        meta = meta[0]
    return meta if isinstance(meta, torch.Tensor) else None


def schema_args(node: torch.fx.Node) -> dict[str, Any]:
    """The arguments a node passes, by their schema names (positional, then keywords)."""
    names = (a.name for a in node.target._schema.arguments)
    return dict(zip(names, node.args, strict=False)) | dict(node.kwargs)


def outputs_read(node: torch.fx.Node) -> set[int | None]:
    """The positions of a multi-output node's outputs that something reads;
    None for a user that takes the whole tuple. A getitem nothing uses does
    not count (make_fx leaves them in its graphs)."""
    return {
        user.args[1] if user.target is operator.getitem else None
        for user in node.users
        if user.target is not operator.getitem or user.users
    }


def arg_meta(node: torch.fx.Node, index: int, name: str = "") -> torch.Tensor | None:
    """The fake tensor of argument ``index``/``name`` of ``node``, or None."""
    return tensor_meta(node_arg(node, index, name, None))


def fake_tensor(value: object) -> torch.Tensor:
    """The fake tensor of an FX value known to be a tensor (traced ones carry it)."""
    meta = tensor_meta(value)
    if meta is None:
        raise TypeError(f"{value!r} carries no fake tensor in its meta")
    return meta


def device_of(meta: torch.Tensor) -> torch.device:
    """A traced tensor's device. A fake tensor's own (``fake_device``): its
    ``device`` reads "meta" while any thread runs a kernel in its fake mode,
    and graphs are built on threads of ours while Dynamo traces on its own
    (a product upgrade, a background compile)."""
    fake = getattr(meta, "fake_device", None)
    return fake if isinstance(fake, torch.device) else meta.device


def arg_tensor(node: torch.fx.Node, index: int, name: str = "") -> torch.Tensor:
    """The fake tensor of tensor argument ``index``/``name`` of ``node``."""
    return fake_tensor(node_arg(node, index, name, None))


def is_static(sizes: Iterable[object]) -> bool:
    """Whether every size (or argument list entry) is a plain int, not symbolic."""
    return all(isinstance(s, int) for s in sizes)


def same_sizes(a: Iterable[object], b: Iterable[object]) -> bool:
    """Whether two size lists are equal, symbolic sizes by their expressions
    (comparing SymInts with ``==`` would add a guard at build time)."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.SymInt) and isinstance(y, torch.SymInt):
            if x.node.expr != y.node.expr:
                return False
        elif not (isinstance(x, int) and isinstance(y, int) and x == y):
            return False
    return True


def has_no_elements(meta: torch.Tensor) -> bool:
    """Whether a fake tensor has a static size of 0."""
    return any(isinstance(s, int) and s == 0 for s in meta.shape)


def node_tensor_metas(node: torch.fx.Node) -> list[torch.Tensor]:
    """The fake tensors of the node's positional tensor arguments and its result."""
    metas = [tensor_meta(a) for a in node.args if isinstance(a, torch.fx.Node)]
    metas.append(tensor_meta(node))
    return [m for m in metas if m is not None]


def has_symbolic_sizes(node: torch.fx.Node) -> bool:
    """Whether any tensor the node reads or makes has a symbolic size."""
    return any(not is_static(meta.shape) for meta in node_tensor_metas(node))


def size_hint(size: int | torch.SymInt) -> int | None:
    """A size, or the example value a symbolic size was traced with."""
    return size if isinstance(size, int) else size.node.hint


def empty_input(node: torch.fx.Node, position: int = 0) -> str | None:
    """An input with at least one element.

    Refuses a node whose tensor argument ``position`` has no elements: MAX's reshape, tile and gather_nd refuse zero-size shapes that torch
    accepts; such a node runs in PyTorch, where it costs nothing.
    """
    meta = tensor_meta(node.args[position])
    if meta is not None and has_no_elements(meta):
        return f"{node.target} of a tensor with no elements"
    return None


def all_of(*checks: SupportsFn) -> SupportsFn:
    """A check passing where each of ``checks`` passes; documented as all of theirs."""

    def check(node: torch.fx.Node) -> str | None:
        for c in checks:
            reason = c(node)
            if reason is not None:
                return reason
        return None

    summaries = [(c.__doc__ or "").strip().split("\n\n")[0].rstrip(".") for c in checks]
    check.__doc__ = "; ".join(s[:1].lower() + s[1:] for s in summaries if s) + "."
    return check


def static_dim(position: int, default: int) -> SupportsFn:
    """A check that the dim a node works along (its argument ``position``,
    named ``dim``, ``default`` when left out) of its first tensor argument
    has a size known at compile time: sorts and scans unroll over it."""

    def check(node: torch.fx.Node) -> str | None:
        """Along a dim whose size is known at compile time."""
        meta = arg_tensor(node, 0)
        if meta.dim() == 0:
            return None
        dim = node_arg(node, position, "dim", default) % meta.dim()
        if not isinstance(meta.shape[dim], int):
            return f"{node.target} along a symbolic dim"
        return None

    return check


def _sizes(node: object) -> list[object] | None:
    meta = tensor_meta(node)
    return None if meta is None else list(meta.shape)


def unrepeated(node: object) -> torch.fx.Node | None:
    """The ``[B, Hkv, L, E]`` tensor that ``node`` repeats to ``[B, Hkv*g, L, E]``
    with consecutive copies of each head (transformers' repeat_kv: unsqueeze,
    expand, clone, view), else None. Attention reads grouped heads directly
    (passes/repeated_kv.py), and its capability checks ask too."""
    views = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
    if not isinstance(node, torch.fx.Node) or node.target not in views:
        return None
    inner = node.args[0]
    if isinstance(inner, torch.fx.Node) and inner.target is aten.clone.default:
        inner = inner.args[0]
    if not isinstance(inner, torch.fx.Node) or inner.target is not aten.expand.default:
        return None
    unsqueezed = inner.args[0]
    if (
        not isinstance(unsqueezed, torch.fx.Node)
        or unsqueezed.target is not aten.unsqueeze.default
        or unsqueezed.args[1] != 2
    ):
        return None
    source = unsqueezed.args[0]
    kv, expanded, repeated = _sizes(source), _sizes(inner), _sizes(node)
    if kv is None or expanded is None or repeated is None or len(kv) != 4:
        return None
    b, heads, length, width = kv
    group = expanded[2]
    if not isinstance(heads, int) or not isinstance(group, int):
        return None
    if not same_sizes(expanded, [b, heads, group, length, width]):
        return None
    if not same_sizes(repeated, [b, heads * group, length, width]):
        return None
    return source  # type: ignore[return-value]
