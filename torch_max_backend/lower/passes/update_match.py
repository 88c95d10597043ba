"""What the optimizer-update patterns share (passes/adam_updates.py,
passes/sgd_updates.py, passes/rmsprop_updates.py): node tests, the casts
of half-precision values, the gradient's direction and the square average
they have in common, AOTAutograd's write-backs, and the conditions under
which an update may run as one in-place kernel."""

from __future__ import annotations

import torch

from ..kit import device_of, is_static, tensor_meta
from .findings import Coefficient, OptimizerUpdate
from .mutations import writes_input

aten = torch.ops.aten
prims = torch.ops.prims
# The value types the update kernels take: float32, and the half-precision
# types, which they compute in float32 and round as the step's ops do.
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
HALF_DTYPES = (torch.bfloat16, torch.float16)


def call(node: object, target: object, arity: int, *keywords: str) -> bool:
    """Whether ``node`` calls ``target`` with ``arity`` positional arguments
    and no keyword arguments but (optionally) those named."""
    return (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target is target
        and len(node.args) == arity
        and set(node.kwargs) <= set(keywords)
    )


def is_input(node: object) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "placeholder"


def is_number(value: object) -> bool:
    return type(value) in (int, float)


def _cast_dtype(node: object) -> torch.dtype | None:
    """The type ``node`` casts to, where it casts and does nothing else:
    ``_to_copy(x, dtype=...)`` (no device or layout change), or
    ``prims.convert_element_type(x, dtype)`` (a half-precision product with
    a float32 number under ``dynamic=True``); else None."""
    if call(node, aten._to_copy.default, 1, "dtype"):
        return node.kwargs.get("dtype")
    if call(node, prims.convert_element_type.default, 2):
        return node.args[1]
    return None


def _float_cast(node: object, source: tuple, result: tuple) -> bool:
    """Whether ``node`` casts from a type in ``source`` to one in ``result``."""
    dtype = _cast_dtype(node)
    meta = tensor_meta(node.args[0]) if dtype is not None else None
    return meta is not None and meta.dtype in source and dtype in result


def upcast_source(node: object, casts: list[torch.fx.Node]) -> object:
    """The half-precision value ``node`` casts to float32 (torch's
    decompositions of lerp and addcdiv compute half-precision operands so),
    the cast appended to ``casts``; ``node`` itself where it is no such cast."""
    if _float_cast(node, HALF_DTYPES, (torch.float32,)):
        casts.append(node)
        return node.args[0]
    return node


def rounded_source(node: object, casts: list[torch.fx.Node]) -> object:
    """The float32 value ``node`` rounds to a half-precision type (such a
    decomposition's result stored as its operands' type), or the
    half-precision value it casts to its own type (a half-precision tensor
    times a float32 number under ``dynamic=True``), the cast appended to
    ``casts``; ``node`` itself where it is no such cast."""
    if _float_cast(node, (torch.float32,), HALF_DTYPES) or any(
        _float_cast(node, (half,), (half,)) for half in HALF_DTYPES
    ):
        casts.append(node)
        return node.args[0]
    return node


def casts_of_type(nodes: list[torch.fx.Node], value: torch.fx.Node) -> bool:
    """Whether each cast among ``nodes`` (``upcast_source``'s and
    ``rounded_source``'s) casts between float32 and ``value``'s own type:
    the only roundings the kernels make are to the values' type."""
    meta = tensor_meta(value)
    for cast in nodes:
        if _cast_dtype(cast) is None:
            continue
        source, result = tensor_meta(cast.args[0]), tensor_meta(cast)
        if meta is None or source is None or result is None:
            return False
        half = source.dtype if result.dtype == torch.float32 else result.dtype
        if half != meta.dtype:
            return False
    return True


def scalar_tensor(node: object) -> bool:
    """Whether ``node`` is a one-element float32 tensor (of static size: the
    patterns look at every graph's nodes, symbolic sizes included)."""
    meta = tensor_meta(node)
    if meta is None or meta.dtype != torch.float32 or not is_static(meta.shape):
        return False
    return meta.numel() == 1


def coefficient(value: object) -> Coefficient | None:
    """``value`` as an update kernel's coefficient: a number as a float; a
    one-element float32 tensor or a symbolic number as its node (under
    ``dynamic=True`` Dynamo hands an optimizer's Python numbers to the graph
    so, and the kernel reads them at each call); None for anything else."""
    if is_number(value):
        return float(value)
    if scalar_tensor(value):
        return value
    if isinstance(value, torch.fx.Node) and isinstance(
        value.meta.get("val"), (torch.SymFloat, torch.SymInt)
    ):
        return value
    return None


def scaled_by(node: torch.fx.Node, key: str) -> Coefficient | None:
    """The number ``node`` scales its argument ``key`` by: its keyword (a
    number, or a symbolic float under ``dynamic=True``), 1 when absent,
    None when neither."""
    if key not in node.kwargs:
        return 1.0
    return coefficient(node.kwargs[key])


def direction_of(
    node: object, param: torch.fx.Node
) -> tuple[torch.fx.Node, Coefficient, bool, list] | None:
    """``(grad, weight_decay, maximize, its nodes)`` of the direction the
    update follows: the gradient input or its negation (maximize), plus
    ``wd * param`` with weight decay."""
    decay: Coefficient | None = 0.0
    nodes = []
    if call(node, aten.add.Tensor, 2, "alpha"):
        if node.args[1] is not param:
            return None  # the decay term must be this parameter's
        decay = scaled_by(node, "alpha")
        nodes.append(node)
        node = node.args[0]
    maximize = call(node, aten.neg.default, 1)
    if maximize:
        nodes.append(node)
        node = node.args[0]
    if decay is None or not is_input(node):
        return None
    return node, decay, maximize, nodes


def square_average(
    node: object, grad: torch.fx.Node
) -> tuple[torch.fx.Node, Coefficient, Coefficient, list[torch.fx.Node]] | None:
    """``(square_avg, beta, w, its nodes)`` of ``grad * grad * w +
    square_avg * beta`` (Adam's second moment, RMSprop's square average) as
    functionalized ``mul_(beta).addcmul_`` reads (``beta`` a number, or a
    graph input's value under ``dynamic=True``), or as the unrolled
    ``_foreach_addcmul`` computes it (foreach_unroll.py)."""
    if call(node, aten.copy.default, 2):
        fma = node.args[1]
        if not call(fma, prims.fma.default, 3):
            return None
        square, w, scaled = fma.args
        if node.args[0] is not scaled:
            return None
        nodes = [node, fma]
    elif call(node, aten.add.Tensor, 2) and call(node.args[1], aten.mul.Tensor, 2):
        scaled, (square, w) = node.args[0], node.args[1].args
        nodes = [node, node.args[1]]
    else:
        return None
    if not (call(square, aten.mul.Tensor, 2) and square.args == (grad, grad)):
        return None
    # A half-precision average times a float32 number under dynamic=True:
    # the product rounded back by a cast, replaced with it.
    rounding: list[torch.fx.Node] = []
    scaled = rounded_source(scaled, rounding)
    if not call(scaled, aten.mul.Tensor, 2):
        return None
    square_avg, beta = scaled.args
    beta, w = coefficient(beta), coefficient(w)
    if not is_input(square_avg) or beta is None or w is None:
        return None
    return square_avg, beta, w, [*nodes, square, scaled, *rounding]


def write_back(target: torch.fx.Node, value: torch.fx.Node) -> torch.fx.Node | None:
    """AOTAutograd's ``copy_(target, value)``, if there is one."""
    for user in target.users:
        if writes_input(user, target) and user.args[1] is value and not user.users:
            return user
    return None


def write_backs_of(
    written: list[tuple[torch.fx.Node, torch.fx.Node]],
) -> tuple[torch.fx.Node, ...] | None:
    """AOTAutograd's write-back of each ``(input, new value)`` pair, in
    order; None where one of them has none."""
    found = tuple(write_back(target, value) for target, value in written)
    return None if any(w is None for w in found) else found


def kernel_may_run(update: OptimizerUpdate) -> bool:
    """Whether the kernel may replace the update's nodes: every tensor it
    touches (the gradient once, where the kernel also writes it) a distinct
    CPU tensor of one static shape and one of the kernels' types (the
    kernel's flat loop; a step
    count, one element on the CPU, besides), and the
    inputs it writes and the nodes it replaces read by the update's own
    nodes alone (so it changes nothing anything else reads)."""
    tensors = [*update.written]
    if not update.grad_written:
        tensors.append(update.grad)
    metas = [tensor_meta(n) for n in tensors]
    first = metas[0]
    if first is None or len(set(tensors)) != len(tensors):
        return False
    if any(
        t is None
        or t.dtype not in KERNEL_DTYPES
        or t.dtype != first.dtype
        or device_of(t).type != "cpu"
        or not is_static(t.shape)
        or t.shape != first.shape
        for t in metas
    ):
        return False
    if update.count is not None:
        count = tensor_meta(update.count.step)
        if (
            count is None
            or device_of(count).type != "cpu"
            or update.count.step in tensors
        ):
            return False
    own = update.kernel_nodes
    return all(set(n.users) <= own for n in (*update.inputs_written, *update.replaced))
