"""The plan between lowering and runtime: plain data that pickles and evaluates."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
from types import SimpleNamespace

import pytest
import sympy
from torch.utils._sympy.functions import (
    CeilToInt,
    FloorDiv,
    FloorToInt,
    IntTrueDiv,
    Max,
    PythonMod,
    TruncToInt,
)

from torch_max_backend.errors import MaxCompilerError
from torch_max_backend.lower.builder.outputs import size_expr
from torch_max_backend.plan import (
    GraphPlan,
    InputKind,
    InputSource,
    OutputKind,
    OutputSlot,
    RuntimeCheck,
    compile_size_expr,
    plan_from_data,
    plan_to_data,
)


def _inputs(*shapes: tuple[int, ...]) -> list[SimpleNamespace]:
    return [SimpleNamespace(shape=s) for s in shapes]


def test_a_plan_pickles_and_says_when_results_pass_through():
    s0 = ("size", 0, 0)
    plan = GraphPlan(
        device="cpu",
        inputs=(
            InputSource(InputKind.FX_INPUT, 0),
            InputSource(InputKind.CONSTANT, 0),
            InputSource(InputKind.SEED),
        ),
        outputs=(
            OutputSlot(OutputKind.GRAPH, 0),
            OutputSlot(
                OutputKind.EXPR, expr=("floordiv", ("add", s0, ("int", 1)), ("int", 2))
            ),
        ),
        num_graph_outputs=1,
    )
    again = pickle.loads(pickle.dumps(plan))
    assert again == plan
    assert not plan.results_only
    simple = GraphPlan(
        "cpu", (), (OutputSlot(OutputKind.GRAPH, 0),), num_graph_outputs=1
    )
    assert simple.results_only
    size = compile_size_expr(again.outputs[1].expr)
    assert size(_inputs((7, 3))) == 4


def _every_kind_of_plan() -> GraphPlan:
    return GraphPlan(
        device="cuda:0",
        inputs=(
            InputSource(InputKind.FX_INPUT, 2),
            InputSource(InputKind.CONSTANT, 0),
            InputSource(InputKind.SEED),
        ),
        outputs=(
            OutputSlot(OutputKind.GRAPH, 0),
            OutputSlot(OutputKind.INPUT, 1),
            OutputSlot(OutputKind.DIM, 0, 1),
            OutputSlot(OutputKind.CONST, value=2.5),
            OutputSlot(OutputKind.EXPR, expr=("mul", ("size", 0, 1), ("int", 3))),
            OutputSlot(
                OutputKind.GRAPH,
                1,
                layout=(
                    (("size", 0, 0), ("int", 2)),
                    (("int", 1), ("int", 4)),
                    ("int", 3),
                ),
            ),
        ),
        mutated=(1,),
        num_graph_outputs=3,
        written_back=((0, 1),),
        checks=(
            RuntimeCheck("IndexError", "index out of bounds (aten.index.Tensor)"),
            RuntimeCheck("RuntimeError", "ZeroDivisionError (aten.remainder)"),
        ),
        check_output=2,
    )


def test_a_plan_survives_json_and_comes_back_equal():
    plan = _every_kind_of_plan()
    again = plan_from_data(json.loads(json.dumps(plan_to_data(plan))))
    assert again == plan


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d.pop("inputs"), "malformed plan"),
        (lambda d: d.update(device=3), "device is a string"),
        (lambda d: d["inputs"].append(["weights", 0]), "is not a valid InputKind"),
        (lambda d: d["outputs"][4].update(expr=["exec", 1]), "unknown size operator"),
        (lambda d: d["outputs"][3].update(value="os.system"), "must be a number"),
        (lambda d: d.update(mutated=["1"]), "must be an int"),
        (lambda d: d.update(written_back=[[0, None]]), "written-back output"),
        (lambda d: d["outputs"][5]["layout"][0].pop(), "as many sizes as strides"),
        (lambda d: d["outputs"][5].update(layout=[[], []]), "sizes, strides, offset"),
        (lambda d: d["outputs"][5]["layout"].__setitem__(2, ["eval"]), "unknown size"),
        (lambda d: d["checks"].append(["SystemExit", "bye"]), "an error name"),
        (lambda d: d["checks"].append(["IndexError"]), "malformed plan|unpack"),
        (lambda d: d.update(check_output=3), "checks' output 3 is not an output"),
    ],
)
def test_a_damaged_plan_is_refused_with_the_reason(damage, message):
    data = plan_to_data(_every_kind_of_plan())
    damage(data)
    with pytest.raises(ValueError, match=message):
        plan_from_data(data)


def test_size_expressions_from_sympy_evaluate_like_python():
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = {s0: (0, 0), s1: (1, 1)}
    cases = [
        (s0 + 1, lambda a, b: a + 1),
        (FloorDiv(s0, 2), lambda a, b: a // 2),
        (PythonMod(s0 * s1, 3), lambda a, b: (a * b) % 3),
        (Max(s0, s1) - 2, lambda a, b: max(a, b) - 2),
        (s0**2 + 3 * s1, lambda a, b: a**2 + 3 * b),
        # math.ceil(n / 2), math.floor(n / m) and int(n / 2) in user code.
        (CeilToInt(IntTrueDiv(s0, 2)), lambda a, b: math.ceil(a / 2)),
        (FloorToInt(IntTrueDiv(s0, s1)), lambda a, b: a // b),
        (TruncToInt(IntTrueDiv(s0 - 8, 2)), lambda a, b: int((a - 8) / 2)),
    ]
    for expr, expected in cases:
        data = size_expr(expr, symbols, "out")
        fn = compile_size_expr(pickle.loads(pickle.dumps(data)))
        for a, b in [(5, 4), (9, 2)]:
            assert fn(_inputs((a,), (1, b))) == expected(a, b), expr


def test_size_expressions_refuse_what_they_cannot_evaluate():
    s0, s9 = sympy.symbols("s0 s9", integer=True, positive=True)
    with pytest.raises(
        MaxCompilerError, match="s9 is not the size of any tensor input"
    ):
        size_expr(s0 + s9, {s0: (0, 0)}, "out")
    with pytest.raises(MaxCompilerError, match="cannot evaluate"):
        size_expr(sympy.sqrt(s0), {s0: (0, 0)}, "out")
    with pytest.raises(ValueError, match="unknown size operator 'exec'"):
        compile_size_expr(("exec", ("int", 1)))


def test_the_plan_imports_neither_torch_nor_max():
    code = (
        "import sys, torch_max_backend.plan\n"
        "loaded = [m for m in ('torch', 'max', 'sympy') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
