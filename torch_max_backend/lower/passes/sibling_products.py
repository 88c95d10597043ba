"""Products of one input by several weights, made one ``row_products`` node.

A decode step's attention projects its hidden rows by q, k and v, its MLP by
gate and up: products of the same few rows by weights stored [N, K] (nn.Linear's
layout), each otherwise a kernel of its own with MAX's fixed cost per kernel
(lower/row_products.py). This pass gathers such siblings, two or three to a
node, where each would be built by one of our few-rows forms that stream
the weight as it lies (``skinny`` or ``row_sums``: the form the grouped
kernel shares): a product this machine measured faster by MAX's matmul or
the vendor BLAS keeps that form, and so does every product under
``product_strategy`` naming another. mm nodes are gathered, and addmm nodes
adding a bias of their own (Qwen-style q, k and v), whose bias is added
after the group; float32 on the CPU with static sizes and at most
``MAX_ROWS`` rows.
"""

from __future__ import annotations

import logging
import operator
from collections import defaultdict
from dataclasses import dataclass

import torch

from ..product_kernels import few_rows_times_large_weight, stored_rows
from ..registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for
from ..row_products import MAX_ROWS, ROW_PRODUCTS
from .graph_copy import graph_copy

_log = logging.getLogger("torch_max_backend.lower.sibling_products")

aten = torch.ops.aten
# The forms whose products the grouped kernel computes as they would.
_STREAMING_FORMS = ("skinny", "row_sums")
# The ops a node of this pass stands for: ``torch_executed_ops`` naming one
# runs the node in PyTorch too (pipeline/fallback.py), as the user asked.
STANDS_FOR: dict[object, frozenset[str]] = {
    ROW_PRODUCTS: frozenset(
        {"aten.mm", "aten.mm.default", "aten.addmm", "aten.addmm.default"}
    )
}


@dataclass(frozen=True)
class _Product:
    """An mm, or an addmm that adds a bias of its own ([N]) to the product."""

    node: torch.fx.Node
    rows: torch.fx.Node
    read: torch.fx.Node  # the product's right operand: the weight transposed
    weight: torch.fx.Node  # as stored, [N, K]
    bias: torch.fx.Node | None


def _product(node: torch.fx.Node) -> _Product | None:
    if node.target is aten.mm.default:
        rows, weight = node.args[:2]
        bias = None
    elif (
        node.target is aten.addmm.default
        and len(node.args) == 3
        and node.kwargs.get("beta", 1) == 1
        and node.kwargs.get("alpha", 1) == 1
    ):
        bias, rows, weight = node.args
        meta = bias.meta.get("val") if isinstance(bias, torch.fx.Node) else None
        if not isinstance(meta, torch.Tensor) or meta.dim() != 1:
            return None
    else:
        return None
    stored = stored_rows(weight)
    if stored is None or not isinstance(rows, torch.fx.Node):
        return None
    return _Product(node, rows, weight, stored, bias)


def _groups_by_input(gm: torch.fx.GraphModule) -> list[list[_Product]]:
    """Products that may join a group, by the input they share, in graph order."""
    by_input: dict[torch.fx.Node, list[_Product]] = defaultdict(list)
    for node in gm.graph.nodes:
        product = _product(node)
        if product is None:
            continue
        lowering = MAPPING_TORCH_ATEN_TO_MAX.get(node.target)
        if lowering is None:
            continue
        rows = product.rows.meta.get("val")
        if not isinstance(rows, torch.Tensor) or not isinstance(rows.shape[0], int):
            continue
        if rows.shape[0] > MAX_ROWS or few_rows_times_large_weight(node) is not None:
            continue
        if strategy_for(lowering, node) not in _STREAMING_FORMS:
            continue
        by_input[product.rows].append(product)
    return [members for members in by_input.values() if len(members) > 1]


def _sizes(count: int) -> list[int]:
    """Groups of three, and of two where three would leave one alone (the
    kernel's arities, row_products.KERNELS)."""
    threes, left = divmod(count, 3)
    if left == 1:
        return [3] * (threes - 1) + [2, 2]
    return [3] * threes + ([2] if left == 2 else [])


def with_sibling_products(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with sibling products made ``row_products`` nodes; ``gm`` itself
    when it has none (so its MAX graph stays the same)."""
    siblings = _groups_by_input(gm)
    if not siblings:
        return gm
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    graph, copies = graph_copy(gm)
    fused_count = 0
    for members in siblings:
        start = 0
        for size in _sizes(len(members)):
            group = members[start : start + size]
            start += size
            first = group[0].node
            needed = [p.weight for p in group] + [
                p.bias for p in group if p.bias is not None
            ]
            if any(order[n] > order[first] for n in needed):
                continue  # a weight or bias computed after the first product
            with graph.inserting_before(copies[first]):
                fused = graph.call_function(
                    ROW_PRODUCTS,
                    (copies[group[0].rows], [copies[p.weight] for p in group]),
                )
                fused.meta["val"] = [p.node.meta["val"] for p in group]
                for i, product in enumerate(group):
                    result = graph.call_function(operator.getitem, (fused, i))
                    result.meta = dict(product.node.meta)
                    if product.bias is not None:
                        # addmm's bias added after the product, as eager's
                        # addmm adds it (beta and alpha 1).
                        result = graph.call_function(
                            aten.add.Tensor, (result, copies[product.bias])
                        )
                        result.meta = dict(product.node.meta)
                    copies[product.node].replace_all_uses_with(result)
            for product in group:
                graph.erase_node(copies[product.node])
                if not copies[product.read].users:
                    graph.erase_node(copies[product.read])
            fused_count += 1
    if not fused_count:
        return gm
    _log.debug("%d groups of sibling products made one node each", fused_count)
    return torch.fx.GraphModule(gm, graph)
