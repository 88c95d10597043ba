"""A ``GraphPlan`` as JSON-ready data and back.

Plans are saved beside compiled artifacts so that a later process can run a
graph it has seen before without building its MAX graph again (pipeline/warm_start.py),
and bundles carry them to other machines: plain data, read with checks,
never unpickled.
"""

from __future__ import annotations

from typing import Any

from .graph_plan import (
    CHECK_ERRORS,
    GraphPlan,
    InputKind,
    InputSource,
    Layout,
    OutputKind,
    OutputSlot,
    RuntimeCheck,
)
from .size_expr import SizeExpr, check_size_expr


def _expr_to_data(expr: SizeExpr) -> list[Any]:
    return [e if not isinstance(e, tuple) else _expr_to_data(e) for e in expr]


def _expr_from_data(data: Any) -> SizeExpr:
    if not isinstance(data, list):
        raise ValueError(f"a size expression is a list, got {data!r}")
    return tuple(_expr_from_data(e) if isinstance(e, list) else e for e in data)


def _layout_to_data(layout: Layout | None) -> list[Any] | None:
    if layout is None:
        return None
    sizes, strides, offset = layout
    return [
        [_expr_to_data(e) for e in sizes],
        [_expr_to_data(e) for e in strides],
        _expr_to_data(offset),
    ]


def _layout_from_data(data: Any) -> Layout | None:
    if data is None:
        return None
    if not isinstance(data, list) or len(data) != 3:
        raise ValueError(f"a layout is [sizes, strides, offset], got {data!r}")
    sizes, strides, offset = data
    if not isinstance(sizes, list) or not isinstance(strides, list):
        raise ValueError(f"a layout's sizes and strides are lists, got {data!r}")
    if len(sizes) != len(strides):
        raise ValueError(f"a layout has as many sizes as strides, got {data!r}")
    exprs = [_expr_from_data(e) for e in [*sizes, *strides, offset]]
    for expr in exprs:
        check_size_expr(expr)
    rank = len(sizes)
    return tuple(exprs[:rank]), tuple(exprs[rank:-1]), exprs[-1]


def plan_to_data(plan: GraphPlan) -> dict[str, Any]:
    """``plan`` as dicts, lists, strings and numbers (``json.dumps`` ready)."""
    return {
        "device": plan.device,
        "inputs": [
            [s.kind.value, s.index, *([list(s.packing)] if s.packing else [])]
            for s in plan.inputs
        ],
        "outputs": [
            {
                "kind": slot.kind.value,
                "index": slot.index,
                "dim": slot.dim,
                "value": slot.value,
                "expr": None if slot.expr is None else _expr_to_data(slot.expr),
                "layout": _layout_to_data(slot.layout),
            }
            for slot in plan.outputs
        ],
        "mutated": list(plan.mutated),
        "num_graph_outputs": plan.num_graph_outputs,
        "written_back": [list(pair) for pair in plan.written_back],
        "checks": [[c.error, c.message] for c in plan.checks],
        "check_output": plan.check_output,
    }


def _int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise ValueError(f"{what} must be an int, got {value!r}")
    return value


def _slot(data: Any) -> OutputSlot:
    if not isinstance(data, dict):
        raise ValueError(f"an output slot is an object, got {data!r}")
    value = data.get("value")
    if value is not None and type(value) not in (int, float, bool):
        raise ValueError(f"an output's constant must be a number, got {value!r}")
    expr = data.get("expr")
    if expr is not None:
        expr = _expr_from_data(expr)
        check_size_expr(expr)
    return OutputSlot(
        OutputKind(data.get("kind")),
        _int(data.get("index"), "an output's index"),
        _int(data.get("dim"), "an output's dim"),
        value,
        expr,
        _layout_from_data(data.get("layout")),
    )


def _input(item: Any) -> InputSource:
    kind, index, *rest = item
    source = InputSource(InputKind(kind), _int(index, "an input's index"))
    if source.kind is not InputKind.PACKED:
        return source
    (packing,) = rest
    values = tuple(_int(v, "a packed weight's size") for v in packing)
    if len(values) != 7:
        raise ValueError(f"a packed input has 7 sizes, got {packing!r}")
    return InputSource(source.kind, source.index, values)


def plan_from_data(data: Any) -> GraphPlan:
    """The plan ``plan_to_data`` wrote; ValueError for anything malformed."""
    if not isinstance(data, dict):
        raise ValueError(f"a plan is an object, got {type(data).__name__}")
    try:
        device = data["device"]
        if not isinstance(device, str):
            raise ValueError(f"a plan's device is a string, got {device!r}")
        inputs = tuple(_input(item) for item in data["inputs"])
        outputs = tuple(_slot(slot) for slot in data["outputs"])
        mutated = tuple(_int(i, "a mutated input") for i in data["mutated"])
        count = _int(data["num_graph_outputs"], "the number of graph outputs")
        written_back = tuple(
            (_int(i, "a written-back input"), _int(o, "a written-back output"))
            for i, o in data.get("written_back", [])
        )
        checks = tuple(_check(item) for item in data.get("checks", []))
        check_output = _int(data.get("check_output", -1), "the checks' output")
        if checks and not 0 <= check_output < count:
            raise ValueError(f"the checks' output {check_output} is not an output")
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed plan: {type(e).__name__}: {e}") from None
    return GraphPlan(
        device, inputs, outputs, mutated, count, written_back, checks, check_output
    )


def _check(data: Any) -> RuntimeCheck:
    error, message = data
    if error not in CHECK_ERRORS or not isinstance(message, str):
        raise ValueError(f"a check is an error name and a message, got {data!r}")
    return RuntimeCheck(error, message)
