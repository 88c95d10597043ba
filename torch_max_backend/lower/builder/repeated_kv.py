"""Attention over key/value heads that the model repeated per query head.

Given an attention mask, transformers' grouped-query models do not call
attention with ``enable_gqa``: ``repeat_kv`` first copies each key/value
head once per query head of its group (``unsqueeze``, ``expand``, ``clone``,
``view``), a copy of the whole KV cache on every token. Our attention
lowering reads grouped heads directly, so the walk hands it the tensor
before the repeat; the copy then has no reader and MAX drops it.
"""

from __future__ import annotations

import torch

from ..kit import same_sizes, tensor_meta

aten = torch.ops.aten

# Attention forwards whose output does not depend on how K and V lay out
# their heads (the backward's gradients do: it keeps the repeated ones).
_ATTENTION = {aten._scaled_dot_product_flash_attention_for_cpu.default}
_KEY_VALUE_ARGS = (1, 2)
_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}


def _shape(node: object) -> list[object] | None:
    meta = tensor_meta(node)
    return None if meta is None else list(meta.shape)


def unrepeated(node: object) -> torch.fx.Node | None:
    """The ``[B, Hkv, L, E]`` tensor that ``node`` repeats to ``[B, Hkv*g, L, E]``
    with consecutive copies of each head (transformers' repeat_kv), else None."""
    if not isinstance(node, torch.fx.Node) or node.target not in _VIEWS:
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
    kv, expanded, repeated = _shape(source), _shape(inner), _shape(node)
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


def find_repeated_kv(
    gm: torch.fx.GraphModule,
) -> dict[torch.fx.Node, list[tuple[int, torch.fx.Node]]]:
    """Per attention node: (argument position, tensor before the repeat) of
    each of its key and value arguments that repeat_kv made."""
    found: dict[torch.fx.Node, list[tuple[int, torch.fx.Node]]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _ATTENTION:
            continue
        pairs = []
        for i in _KEY_VALUE_ARGS:
            source = unrepeated(node.args[i]) if len(node.args) > i else None
            if source is not None:
                pairs.append((i, source))
        if pairs:
            found[node] = pairs
    return found
