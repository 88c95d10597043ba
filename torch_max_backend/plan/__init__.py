"""What lowering produces and the runtime (and export) consume: plain data.

A ``GraphPlan`` says, for one compiled MAX graph, where each MAX input comes
from and how MAX's outputs become the values the FX graph returns. It imports
neither torch nor MAX nor sympy, pickles, and can be sent to a worker process
or written beside an exported graph.
"""

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
from .plan_json import plan_from_data, plan_to_data
from .size_expr import SizeExpr, SizeFunction, compile_size_expr

__all__ = [
    "CHECK_ERRORS",
    "GraphPlan",
    "InputKind",
    "InputSource",
    "Layout",
    "OutputKind",
    "OutputSlot",
    "RuntimeCheck",
    "SizeExpr",
    "SizeFunction",
    "compile_size_expr",
    "plan_from_data",
    "plan_to_data",
]
