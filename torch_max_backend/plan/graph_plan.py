"""The plan of one MAX graph: its inputs' sources and its outputs' slots."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .size_expr import SizeExpr


class InputKind(enum.Enum):
    FX_INPUT = "fx_input"  # FX graph input number ``index``
    CONSTANT = "constant"  # constant number ``index`` (a graph attribute, a scalar)
    SEED = "seed"  # a fresh random seed from torch's generator at every call
    # FX input ``index`` is a symbolic int: an empty [value, 0] tensor carries it
    INT = "int"
    # FX input ``index`` is a symbolic int used only as a number: a rank-0
    # int64 tensor carries its value
    NUMBER = "number"
    # FX input ``index``, laid out channels-last, as its dense N, *spatial, C
    # view (lower/builder/channels_last_inputs.py)
    CHANNELS_LAST = "channels_last"
    # FX input ``index`` (a weight) packed by the vendor BLAS as ``packing``
    # says (kernels/weight_packing.py): a graph with frozen weights
    PACKED = "packed"


@dataclass(frozen=True)
class InputSource:
    """Where one MAX input comes from at run time. ``packing``, for a PACKED
    input only: the weight's rows, k, n, whether it is stored [n, k], its
    slices, its operands' type and the type it is stored in
    (weight_packing.PackSpec.as_list)."""

    kind: InputKind
    index: int = -1
    packing: tuple[int, ...] = ()


class OutputKind(enum.Enum):
    GRAPH = "graph"  # MAX output number ``index``
    INPUT = "input"  # FX input number ``index`` itself
    DIM = "dim"  # size ``dim`` of FX input ``index``
    EXPR = "expr"  # the size expression ``expr`` of the FX inputs' sizes
    CONST = "const"  # ``value``


# Sizes, strides and storage offset, each a size expression (``("int", n)``
# when static): how torch's as_strided reads a MAX output.
Layout = tuple[tuple[SizeExpr, ...], tuple[SizeExpr, ...], SizeExpr]


@dataclass(frozen=True)
class OutputSlot:
    """Where one value returned by the FX graph comes from at run time.

    A GRAPH slot with a ``layout`` is MAX output ``index`` read through
    ``as_strided``: a view of another output, or a dense output in a permuted
    memory order (channels-last), given the sizes, strides and aliasing eager
    PyTorch gives it.
    """

    kind: OutputKind
    index: int = -1
    dim: int = -1
    value: int | float | bool | None = None
    expr: SizeExpr | None = None
    layout: Layout | None = None


# The errors a check raises, by name: those eager PyTorch raises for them.
CHECK_ERRORS: dict[str, type[Exception]] = {
    "IndexError": IndexError,
    "RuntimeError": RuntimeError,
}


@dataclass(frozen=True)
class RuntimeCheck:
    """An input the graph refuses as eager PyTorch does: ``error`` (a name in
    CHECK_ERRORS) with ``message`` when the graph's flag for it is set."""

    error: str
    message: str

    def exception(self) -> Exception:
        """The error raised when the check's flag is set."""
        return CHECK_ERRORS[self.error](self.message)


@dataclass(frozen=True)
class GraphPlan:
    """How the runtime calls one MAX graph like the FX graph it came from.

    ``device`` is torch's device string ("cpu", "cuda:0"); ``mutated`` lists
    the FX inputs the graph writes in place (MAX buffers): AOTAutograd's input
    mutations, such as an optimizer's parameter and momentum updates.
    ``written_back`` pairs an FX input with the MAX output holding its new
    value, copied into it after the call (mutated inputs past the graph's
    buffer budget). ``checks`` are raised after the call when their flags,
    one boolean each in MAX output ``check_output``, are set.
    """

    device: str
    inputs: tuple[InputSource, ...]
    outputs: tuple[OutputSlot, ...]
    mutated: tuple[int, ...] = field(default=())
    num_graph_outputs: int = 0
    written_back: tuple[tuple[int, int], ...] = field(default=())
    checks: tuple[RuntimeCheck, ...] = field(default=())
    check_output: int = -1

    @property
    def results_only(self) -> bool:
        """Whether the FX graph returns MAX's outputs as they are, in order."""
        return (
            not self.mutated
            and not self.written_back
            and len(self.outputs) == self.num_graph_outputs
            and all(
                slot.kind is OutputKind.GRAPH and slot.index == i and not slot.layout
                for i, slot in enumerate(self.outputs)
            )
        )
