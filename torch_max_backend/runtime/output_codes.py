"""How the compiled callable assembles each FX output from a MAX call.

Each output slot of a graph plan becomes a small code, read by the hot loop in
``compiled_graph.py``: a MAX result, an FX input, an input's size, a constant,
a size expression, or a MAX result read with eager's sizes and strides.
"""

from __future__ import annotations

from typing import Any

import torch

from ..plan import Layout, OutputKind, OutputSlot, compile_size_expr

# Output assembly codes, compared as small ints in the hot loop.
GRAPH, INPUT, DIM, CONST, EXPR, STRIDED = range(6)
CODES = {
    OutputKind.GRAPH: GRAPH,
    OutputKind.INPUT: INPUT,
    OutputKind.DIM: DIM,
    OutputKind.CONST: CONST,
    OutputKind.EXPR: EXPR,
}


def laid_out(
    result: torch.Tensor, sizes: list[int], strides: list[int], offset: int
) -> torch.Tensor:
    """``result``'s memory read with eager's sizes, strides and offset, as a
    tensor of its own rather than a view (``as_strided``): autograd forbids
    writing in place into a view that a custom Function (AOTAutograd's
    compiled forward) returned, where eager's tensor takes the write."""
    laid_out = result.new_empty(0)
    return laid_out.set_(result.untyped_storage(), offset, sizes, strides)


def _layout_function(layout: Layout) -> Any:
    """A function of the FX inputs giving ``as_strided``'s arguments."""
    sizes, strides, offset = layout
    if all(e[0] == "int" for e in (*sizes, *strides, offset)):
        fixed = ([e[1] for e in sizes], [e[1] for e in strides], offset[1])
        return lambda args: fixed
    size_fns = [compile_size_expr(e) for e in sizes]
    stride_fns = [compile_size_expr(e) for e in strides]
    offset_fn = compile_size_expr(offset)
    return lambda args: (
        [f(args) for f in size_fns],
        [f(args) for f in stride_fns],
        offset_fn(args),
    )


def slot_code(slot: OutputSlot) -> tuple[int, int, int, Any]:
    """(code, index, dim, value) of one output slot, for the hot loop."""
    value = slot.value
    if slot.layout is not None:
        return (STRIDED, slot.index, slot.dim, _layout_function(slot.layout))
    if slot.kind is OutputKind.EXPR:
        assert slot.expr is not None
        value = compile_size_expr(slot.expr)
    return (CODES[slot.kind], slot.index, slot.dim, value)
