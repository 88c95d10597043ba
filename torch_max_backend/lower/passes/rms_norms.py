"""Root-mean-square norms written out as ATen ops, made one ``rms_norm`` node.

transformers' llama-, T5-, Gemma-, Mistral- and Qwen-style models write their
norm out (``w * (x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))``), and
torch's own ``F.rms_norm`` and ``nn.RMSNorm`` reach a backend decomposed the
same way. MAX builds that chain as two kernels (the mean of squares, then the
scaling) where its RMS norm op is one: about 4 us a norm saved at the small
sizes where a model's call is a hundred such kernels (12 norms at [32, 64]
with a product after each, one graph: 274 us against 322 composed, Intel
Xeon). The chain becomes one ``aten.rms_norm`` node, which its lowering
(lower/ops/normalization.py) hands to MAX's op, and which PyTorch runs as the
chain wherever the node falls back.

Only float32 chains over the last dim whose inner values nothing else reads
are rewritten (a training graph that saves the rsqrt for its backward keeps
the chain); half precision keeps it too, since MAX's kernel would compute it
in float32 where eager rounds each step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ..kit import tensor_meta
from .graph_copy import graph_copy

_log = logging.getLogger("torch_max_backend.lower.rms_norms")

aten = torch.ops.aten
_ADDS = (aten.add.Tensor, aten.add.Scalar)


@dataclass(frozen=True)
class _Norm:
    """One written-out norm: its input, weight and epsilon, its result and
    the nodes it replaces."""

    x: torch.fx.Node
    weight: torch.fx.Node
    eps: float
    result: torch.fx.Node
    inner: tuple[torch.fx.Node, ...]


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _other(node: torch.fx.Node, one: torch.fx.Node) -> object:
    """The operand of the binary ``node`` that is not ``one``."""
    a, b = node.args[:2]
    return b if a is one else a if b is one else None


def _square_of(node: torch.fx.Node) -> torch.fx.Node | None:
    """x where ``node`` is x ** 2 or x * x."""
    if node.target is aten.pow.Tensor_Scalar and node.args[1] == 2:
        return node.args[0]
    if node.target is aten.mul.Tensor and node.args[0] is node.args[1]:
        return node.args[0]
    return None


def _is_last_dim_mean(node: torch.fx.Node, rank: int) -> bool:
    if node.target is not aten.mean.dim or len(node.args) < 3:
        return False
    dims, keepdim = node.args[1], node.args[2]
    return (
        keepdim is True
        and list(dims) in ([-1], [rank - 1])
        and "dtype" not in node.kwargs
    )


def _norm_at(square: torch.fx.Node) -> _Norm | None:
    """The norm whose chain starts at ``square``, if it is one."""
    x = _square_of(square)
    meta = tensor_meta(x)
    if x is None or meta is None or meta.dtype != torch.float32 or meta.dim() < 1:
        return None
    mean = _only_user(square)
    if mean is None or not _is_last_dim_mean(mean, meta.dim()):
        return None
    add = _only_user(mean)
    if add is None or add.target not in _ADDS or add.args[0] is not mean:
        return None
    eps = add.args[1]
    if type(eps) is not float or add.kwargs.get("alpha", 1) != 1:
        return None
    rsqrt = _only_user(add)
    if rsqrt is None or rsqrt.target is not aten.rsqrt.default:
        return None
    scaled = _only_user(rsqrt)
    if scaled is None or scaled.target is not aten.mul.Tensor:
        return None
    if _other(scaled, rsqrt) is not x:
        return None
    result = _only_user(scaled)
    if result is None or result.target is not aten.mul.Tensor:
        return None
    weight = _other(result, scaled)
    w_meta = tensor_meta(weight)
    if (
        w_meta is None
        or w_meta.dtype != torch.float32
        or list(w_meta.shape) != [meta.shape[-1]]
        or not isinstance(meta.shape[-1], int)
        or tensor_meta(result) is None
        or tensor_meta(result).shape != meta.shape
    ):
        return None
    return _Norm(x, weight, eps, result, (square, mean, add, rsqrt, scaled))


def with_rms_norms(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each written-out RMS norm one ``aten.rms_norm`` node;
    ``gm`` itself when it has none (so its MAX graph stays the same)."""
    norms = [n for node in gm.graph.nodes if (n := _norm_at(node)) is not None]
    if not norms:
        return gm
    graph, copies = graph_copy(gm)
    for norm in norms:
        result = copies[norm.result]
        with graph.inserting_before(result):
            fused = graph.call_function(
                aten.rms_norm.default,
                (
                    copies[norm.x],
                    [tensor_meta(norm.x).shape[-1]],
                    copies[norm.weight],
                    norm.eps,
                ),
            )
        fused.meta = dict(result.meta)
        result.replace_all_uses_with(fused)
        graph.erase_node(result)
        # A later norm of this one's result reads the new node.
        copies[norm.result] = fused
        for node in reversed(norm.inner):
            graph.erase_node(copies[node])
    _log.debug("%d RMS norms made one node each", len(norms))
    return torch.fx.GraphModule(gm, graph)
