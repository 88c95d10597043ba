"""The lowering kit: reading an FX node's arguments and metadata, and the
capability conditions several families share.

Capability checks (``supports=``) see the FX node, not MAX values: they read
arguments (positional or keyword) and torch's fake tensors through these
helpers rather than each family indexing ``node.args`` its own way.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import SupportsFn


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


def arg_meta(node: torch.fx.Node, index: int, name: str = "") -> torch.Tensor | None:
    """The fake tensor of argument ``index``/``name`` of ``node``, or None."""
    return tensor_meta(node_arg(node, index, name, None))


def node_tensor_metas(node: torch.fx.Node) -> list[torch.Tensor]:
    """The fake tensors of the node's positional tensor arguments and its result."""
    metas = [tensor_meta(a) for a in node.args if isinstance(a, torch.fx.Node)]
    metas.append(tensor_meta(node))
    return [m for m in metas if m is not None]


def has_symbolic_sizes(node: torch.fx.Node) -> bool:
    """Whether any tensor the node reads or makes has a symbolic size."""
    return any(
        not all(isinstance(s, int) for s in meta.shape)
        for meta in node_tensor_metas(node)
    )


def size_hint(size: int | torch.SymInt) -> int | None:
    """A size, or the example value a symbolic size was traced with."""
    return size if isinstance(size, int) else size.node.hint


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
