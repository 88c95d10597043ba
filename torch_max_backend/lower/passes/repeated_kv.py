"""Attention over key/value heads that the model repeated per query head.

Given an attention mask, transformers' grouped-query models do not call
attention with ``enable_gqa``: ``repeat_kv`` first copies each key/value
head once per query head of its group (``unsqueeze``, ``expand``, ``clone``,
``view``), a copy of the whole KV cache on every token. Our attention
lowering reads grouped heads directly, so the walk hands it the tensor
before the repeat; the copy then has no reader and MAX drops it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..kit import unrepeated
from .findings import GraphFindings, frozen_map

aten = torch.ops.aten

# Attention forwards whose output does not depend on how K and V lay out
# their heads (the backward's gradients do: it keeps the repeated ones).
_ATTENTION = {aten._scaled_dot_product_flash_attention_for_cpu.default}
_KEY_VALUE_ARGS = (1, 2)


def find_repeated_kv(
    gm: torch.fx.GraphModule, found: GraphFindings
) -> Mapping[torch.fx.Node, tuple[tuple[int, torch.fx.Node], ...]]:
    """The pass: per attention node, (argument position, tensor before the
    repeat) of each of its key and value arguments that repeat_kv made."""
    repeated: dict[torch.fx.Node, tuple[tuple[int, torch.fx.Node], ...]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _ATTENTION:
            continue
        pairs = []
        for i in _KEY_VALUE_ARGS:
            source = unrepeated(node.args[i]) if len(node.args) > i else None
            if source is not None:
                pairs.append((i, source))
        if pairs:
            repeated[node] = tuple(pairs)
    return frozen_map(repeated)
