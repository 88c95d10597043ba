"""Flex attention (``torch.nn.attention.flex_attention``) lowered through eager's own math.

The ``flex_attention`` node carries the user's score function and the block
mask's mask function as graphs over scalars (a score and its batch, head,
query and key positions). Its lowering traces the dense computation eager
runs on a CPU (torch's ``math_attention``: the scores, both functions vmapped
over every position, a softmax that leaves fully masked rows at zero, the
product with the values, GQA's heads repeated) into ATen ops with the node's
sizes and the backend's decompositions, and lowers that graph in place with
the walk's own calls, as a compiled region is. So the functions become
elementwise ops over the score matrix inside the graph's one MAX graph.

The block mask's block lists are not read: as in eager on a CPU, the mask
function decides every score, so a block mask built from it (what
``create_block_mask`` returns) gives eager's results. The node returns the
attention, and the logsumexp and the largest score in base 2, as eager does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._higher_order_ops.flex_attention import math_attention
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import make_fx

from ..registry import decomposition_table
from .higher_order import CallNode, _build_inner, _subgraph, _why_not_inner

# The traced dense graph, kept on the node: the capability check and the
# build (and a graph's second build) read it.
_DENSE = "max_flex_attention_dense"


def _operands(node: torch.fx.Node) -> list[Any]:
    """query, key, value, then the score function's and the mask function's
    captured tensors: the dense graph's inputs, in order."""
    query, key, value = node.args[:3]
    score_buffers, mask_buffers = node.args[7], node.args[8]
    return [query, key, value, *score_buffers, *mask_buffers]


def dense_graph(node: torch.fx.Node) -> torch.fx.GraphModule:
    """``node``'s attention as eager computes it on a CPU, traced into ATen ops."""
    traced = node.meta.get(_DENSE)
    if traced is not None:
        return traced
    gm = node.graph.owning_module
    score_fn = _subgraph(gm, node.args[3])
    block_mask = node.args[4]
    mask_fn = _subgraph(gm, block_mask[-1])
    scale, kernel_options = node.args[5], node.args[6]
    scored = len(node.args[7])

    def dense(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        query, key, value, *buffers = tensors
        return math_attention(
            query,
            key,
            value,
            score_fn,
            (mask_fn,),  # the math reads only the mask function, last
            scale,
            kernel_options,
            tuple(buffers[:scored]),
            tuple(buffers[scored:]),
        )

    # The operands' own fake tensors: tracing under the mode they belong to.
    fakes = [operand.meta["val"] for operand in _operands(node)]
    traced = make_fx(dense, decomposition_table=decomposition_table())(*fakes)
    _inline_scalar_constants(traced)
    traced.graph.eliminate_dead_code()
    traced.recompile()
    node.meta[_DENSE] = traced
    return traced


def _inline_scalar_constants(traced: torch.fx.GraphModule) -> None:
    """Each one-element constant the trace kept as an attribute (the math's
    ``-inf`` fill) written as a ``full`` of its value, so that the graph
    holds no attribute (which the walk reads as a graph of its own)."""
    graph = traced.graph
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        value = getattr(traced, node.target)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            continue
        with unset_fake_temporarily():  # a real tensor, read under the trace's mode
            number = value.item()
        with graph.inserting_before(node):
            full = graph.call_function(
                torch.ops.aten.full.default,
                (list(value.shape), number),
                {"dtype": value.dtype, "device": value.device},
            )
        full.meta["val"] = node.meta.get("val")
        for user in list(node.users):
            if user.target is torch.ops.aten.lift_fresh_copy.default:
                full.meta["val"] = user.meta.get("val")
                user.replace_all_uses_with(full)
                graph.erase_node(user)
        node.replace_all_uses_with(full)
        graph.erase_node(node)


def why_not_flex_attention(
    node: torch.fx.Node,
    gm: torch.fx.GraphModule,
    why_unsupported: Callable[[torch.fx.Node], object],
    lowering_of: Callable[[torch.fx.Node], object],
) -> str | None:
    """Why this ``flex_attention`` node cannot be lowered on MAX, or None."""
    del gm
    for operand in _operands(node):
        meta = operand.meta.get("val") if isinstance(operand, torch.fx.Node) else None
        if not isinstance(meta, torch.Tensor):
            return "an operand that is not a tensor"
        if not all(isinstance(size, int) for size in meta.shape):
            return "symbolic sizes"
    try:
        traced = dense_graph(node)
    except Exception as e:  # the user's functions, traced anew
        return f"its functions could not be traced ({type(e).__name__}: {e})"
    reason = _why_not_inner(traced, why_unsupported, lowering_of)
    return None if reason is None else f"its dense form {reason}"


def lower_flex_attention(
    node: torch.fx.Node, values: dict[torch.fx.Node, Any], call: CallNode
) -> list[Any]:
    """``node``'s (attention, logsumexp, largest score) built in place."""
    operands = [values[o] for o in _operands(node)]
    return _build_inner(dense_graph(node), operands, call)
