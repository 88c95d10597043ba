"""A ``foreach=True`` Adam or AdamW step's denominators, in the form of the
single-tensor step.

Compiled, torch's multi-tensor Adam (torch/optim/adam.py, capturable form)
computes each parameter's denominator from its counted step ``t`` as::

    ss  = reciprocal((beta1 ** t - 1) / lr)
    s2  = sqrt(-(beta2 ** t - 1))
    den = (sqrt(exp_avg_sq') / s2 + eps) / ss

where the single-tensor step (the for-loop form, passes/adam_counts.py)
computes ``sqrt(exp_avg_sq') / a + b`` with ``a = sqrt(1 - beta2 ** t) *
-size``, ``b = reciprocal(-size) * eps`` and ``size = reciprocal(1 - beta1
** t) * lr`` (``lr / (1 - beta1 ** t)`` for a tensor ``lr``): the same
numbers, rounded in another order. Once the list ops
are unrolled (foreach_unroll.py), each such denominator is rebuilt in the
single-tensor form, so that the update and its count run as our kernels
(adam_updates.py) and give what the for-loop form gives, bit for bit.
Anything else is left as it is.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from .graph_copy import graph_copy
from .update_match import call, is_number, scalar_tensor

_log = logging.getLogger("torch_max_backend.lower.foreach_adam")

aten = torch.ops.aten
Node = torch.fx.Node


def _power_less_one(node: object) -> tuple[float, Node, list[Node]] | None:
    """``(beta, t, its nodes)`` of ``beta ** t - 1``."""
    if not (call(node, aten.sub.Tensor, 2) and node.args[1] == 1):
        return None
    power = node.args[0]
    if not (call(power, aten.pow.Scalar, 2) and is_number(power.args[0])):
        return None
    return float(power.args[0]), power.args[1], [node, power]


def _multi_tensor_denominator(node: Node) -> dict[str, Any] | None:
    """What the multi-tensor denominator ``node`` is made of, if it is one."""
    if not call(node, aten.div.Tensor, 2):
        return None
    shifted, ss = node.args
    if not (call(shifted, aten.add.Tensor, 2) and is_number(shifted.args[1])):
        return None
    quotient, eps = shifted.args
    if not call(quotient, aten.div.Tensor, 2):
        return None
    root, s2 = quotient.args
    if not (call(root, aten.sqrt.default, 1) and call(s2, aten.sqrt.default, 1)):
        return None
    negated = s2.args[0]
    if not call(ss, aten.reciprocal.default, 1) or not call(
        negated, aten.neg.default, 1
    ):
        return None
    scaled = ss.args[0]
    if not call(scaled, aten.div.Tensor, 2):
        return None
    lr = scaled.args[1]
    if not (is_number(lr) or scalar_tensor(lr)):
        return None
    first, second = _power_less_one(scaled.args[0]), _power_less_one(negated.args[0])
    if first is None or second is None or first[1] is not second[1]:
        return None
    if not scalar_tensor(first[1]):  # the count, whose meta the rebuilt chain takes
        return None
    return {
        "root": root,
        "t": first[1],
        "beta1": first[0],
        "beta2": second[0],
        "lr": float(lr) if is_number(lr) else lr,
        "eps": float(eps),
        "old": [
            node,
            shifted,
            quotient,
            s2,
            negated,
            ss,
            scaled,
            *first[2],
            *second[2],
        ],
    }


def _single_tensor_denominator(graph: torch.fx.Graph, found: dict[str, Any]) -> Node:
    """``sqrt(exp_avg_sq') / a + b`` as the single-tensor step computes it."""
    t, scalar_meta = found["t"], found["t"].meta

    def op(target: Any, *args: Any) -> Node:
        built = graph.call_function(target, args)
        built.meta.update(scalar_meta)
        return built

    bc1 = op(aten.rsub.Scalar, op(aten.pow.Scalar, found["beta1"], t), 1)
    lr = found["lr"]
    if isinstance(lr, Node):  # a tensor learning rate divides, as there
        size = op(aten.div.Tensor, lr, bc1)
    else:
        size = op(aten.mul.Tensor, op(aten.reciprocal.default, bc1), lr)
    negative = op(aten.neg.default, size)
    bc2 = op(aten.rsub.Scalar, op(aten.pow.Scalar, found["beta2"], t), 1)
    a = op(aten.mul.Tensor, op(aten.sqrt.default, bc2), negative)
    b = op(aten.mul.Tensor, op(aten.reciprocal.default, negative), found["eps"])
    root = found["root"]
    quotient = graph.call_function(aten.div.Tensor, (root, a))
    quotient.meta.update(root.meta)
    denominator = graph.call_function(aten.add.Tensor, (quotient, b))
    denominator.meta.update(root.meta)
    return denominator


def with_single_tensor_adam(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each multi-tensor Adam denominator rebuilt in the
    single-tensor form; ``gm`` itself when there is none."""
    found = [n for n in gm.graph.nodes if _multi_tensor_denominator(n) is not None]
    if not found:
        return gm
    graph, copies = graph_copy(gm)
    for original in found:
        node = copies[original]
        parts = _multi_tensor_denominator(node)
        assert parts is not None  # as for the original
        with graph.inserting_before(node):
            rebuilt = _single_tensor_denominator(graph, parts)
        node.replace_all_uses_with(rebuilt)
        # The old chain, now unread (each parameter has its own).
        for old in parts["old"]:
            if not old.users:
                graph.erase_node(old)
    _log.debug("rebuilt %d multi-tensor Adam denominators", len(found))
    return torch.fx.GraphModule(gm, graph)
