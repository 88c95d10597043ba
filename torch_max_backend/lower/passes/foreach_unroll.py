"""An optimizer step's ``_foreach_*`` ops, unrolled into one op per tensor.

An optimizer created with ``foreach=True`` (PyTorch's default for CUDA
parameters) updates its parameters by list ops: ``_foreach_mul_(params,
decay)``, ``_foreach_addcmul_(exp_avg_sqs, grads, grads, w2)``, and so on.
Each parameter's update is then spread over a dozen list ops, where the
optimizer-update patterns (adam_updates.py, sgd_updates.py) look for it
parameter by parameter. In a graph that writes its inputs in place (an
optimizer step), each list op the table below knows is replaced by one
single-tensor op per element, built as the list op's lowering builds that
element (lower/ops/foreach.py): the same values, now visible to the
patterns. Elsewhere (and for list ops not in the table) a list op keeps its
one lowering.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any

import torch

from .graph_copy import graph_copy
from .mutations import writes_input

_log = logging.getLogger("torch_max_backend.lower.foreach_unroll")

aten = torch.ops.aten
Graph = torch.fx.Graph
Node = torch.fx.Node
# Builds element ``i`` of a list op: (graph, the list op's args and kwargs, i).
Unroll = Callable[[Graph, tuple, dict, int], Node]


def _packet(name: str) -> Any:
    return getattr(aten, f"_foreach_{name}", None)


def _unary(op: Any) -> Unroll:
    return lambda graph, args, kwargs, i: graph.call_function(op, (args[0][i],))


def _binary(op: Any, per_element: bool) -> Unroll:
    """``op(self[i], other)``, ``other[i]`` for the List and ScalarList forms;
    ``alpha`` kept."""

    def build(graph: Graph, args: tuple, kwargs: dict, i: int) -> Node:
        other = args[1][i] if per_element else args[1]
        return graph.call_function(op, (args[0][i], other), dict(kwargs))

    return build


def _pow_scalar(graph: Graph, args: tuple, kwargs: dict, i: int) -> Node:
    return graph.call_function(aten.pow.Scalar, (args[0], args[1][i]))


def _addc(combine: Any, per_element: bool) -> Unroll:
    """``self + value * combine(tensor1, tensor2)``, as the list op's
    lowering computes it (the product by 1 left out: it changes nothing)."""

    def build(graph: Graph, args: tuple, kwargs: dict, i: int) -> Node:
        value = args[3] if len(args) > 3 else kwargs.get("value", 1)
        value = value[i] if per_element else value
        term = graph.call_function(combine, (args[1][i], args[2][i]))
        if value != 1:
            term = graph.call_function(aten.mul.Tensor, (term, value))
        return graph.call_function(aten.add.Tensor, (args[0][i], term))

    return build


def _table() -> dict[Any, Unroll]:
    table: dict[Any, Unroll] = {}

    def put(name: str, overload: str, unroll: Unroll) -> None:
        packet = _packet(name)
        op = getattr(packet, overload, None) if packet is not None else None
        if op is not None:
            table[op] = unroll

    for name in ("sqrt", "reciprocal", "neg"):
        put(name, "default", _unary(getattr(aten, name).default))
    for name in ("add", "sub", "mul", "div"):
        single = getattr(aten, name).Tensor
        put(name, "List", _binary(single, per_element=True))
        put(name, "ScalarList", _binary(single, per_element=True))
        put(name, "Scalar", _binary(single, per_element=False))
        put(name, "Tensor", _binary(single, per_element=False))  # none for sub
    put("maximum", "List", _binary(aten.maximum.default, per_element=True))
    put("pow", "ScalarAndTensor", _pow_scalar)
    for name, combine in (("addcmul", aten.mul.Tensor), ("addcdiv", aten.div.Tensor)):
        put(name, "Scalar", _addc(combine, per_element=False))
        put(name, "ScalarList", _addc(combine, per_element=True))
    return table


UNROLLS = _table()
# The list ops whose elements are built of several ops.
COMPOSED = frozenset(
    op
    for name in ("addcmul", "addcdiv")
    for overload in ("Scalar", "ScalarList")
    if (op := getattr(_packet(name), overload, None)) is not None
)


def _elements(node: Node) -> dict[int, Node] | None:
    """The ``getitem`` reading each element of the list op ``node``, if
    those are all that read it and each element's value is a tensor; where
    the element is built of several ops (addcmul, addcdiv), of the shape and
    dtype of every tensor the op reads for it, so that its intermediate
    values are too (the list op's lowering casts to the element's dtype)."""
    readers: dict[int, Node] = {}
    for user in node.users:
        if user.target is not operator.getitem or not isinstance(user.args[1], int):
            return None
        readers[user.args[1]] = user
    composed = node.target in COMPOSED
    lists = [a for a in node.args if isinstance(a, (list, tuple)) and composed]
    for i, reader in readers.items():
        value = reader.meta.get("val")
        if not isinstance(value, torch.Tensor):
            return None
        for items in lists:
            item = items[i] if i < len(items) else None
            if isinstance(item, Node):
                meta = item.meta.get("val")
                if not (
                    isinstance(meta, torch.Tensor)
                    and meta.shape == value.shape
                    and meta.dtype == value.dtype
                ):
                    return None
    return readers


def _updates_inputs(gm: torch.fx.GraphModule) -> bool:
    return any(
        node.op == "call_function" and writes_input(node, node.args[0])
        for node in gm.graph.nodes
    )


def unrolled_foreach(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` with each list op of ``UNROLLS`` replaced by its single-tensor
    ops, where ``gm`` writes its inputs in place; ``gm`` itself otherwise
    (so that its MAX graph stays the same)."""
    found = [
        n for n in gm.graph.nodes if n.op == "call_function" and n.target in UNROLLS
    ]
    found = [n for n in found if _elements(n) is not None]
    if not found or not _updates_inputs(gm):
        return gm
    graph, copies = graph_copy(gm)
    for original in found:
        node = copies[original]
        unroll = UNROLLS[node.target]
        readers = _elements(node)
        assert readers is not None  # as for the original
        for i, reader in readers.items():
            with graph.inserting_before(node):
                single = unroll(graph, node.args, node.kwargs, i)
            _with_meta(single, reader.meta)
            reader.replace_all_uses_with(single)
            graph.erase_node(reader)
        graph.erase_node(node)
    _log.debug("unrolled %d foreach ops", len(found))
    return torch.fx.GraphModule(gm, graph)


def _with_meta(node: Node, meta: dict[str, Any]) -> None:
    """Give ``node`` and the nodes built with it the element's meta (one
    shape and dtype throughout: ``_elements`` checked)."""
    stack = [node]
    while stack:
        current = stack.pop()
        if "val" in current.meta:
            continue
        current.meta.update(meta)
        stack.extend(a for a in current.args if isinstance(a, Node))
