"""Adam and AdamW parameter updates, each done by one in-place kernel.

Compiled, torch's single-tensor Adam and AdamW (torch/optim/adam.py, the
form Dynamo traces on the CPU) update each parameter as::

    exp_avg'    = lerp(exp_avg, grad, w1)
    exp_avg_sq' = copy(mul(exp_avg_sq, beta2), fma(grad * grad, w2, mul(exp_avg_sq, beta2)))
    param'      = addcdiv(param * decay, exp_avg', sqrt(exp_avg_sq') / a + b)

(``param * decay`` is ``param`` itself without weight decay, ``decay`` a
number or, with a tensor learning rate, a one-element tensor; ``a`` and
``b`` are one-element tensors of the step's bias corrections and learning
rate),
then AOTAutograd copies the three new values into their inputs. Lowered op
by op that is several kernels, each storing one result and reading its
inputs again. Where the three inputs are read by nothing else, the walk
runs our ``adam_step`` kernel instead
(kernels/mojo_optimizer/adam_step.mojo): each value read once and written
once, in place (builder/optimizer_store.py).
Adam's own (coupled) weight decay, ``grad + wd * param``, is the kernel's
too (its ``coupled_decay``), and so is maximize's negated gradient (its
``maximize``); with amsgrad, whose denominator reads ``maximum(
max_exp_avg_sq, exp_avg_sq')``, the ``adam_amsgrad_step`` kernel also
reads and writes the largest second moment. bfloat16 and float16
parameters take the same kernels, which compute in float32 and round where
eager's ops round (torch's decompositions cast a half-precision lerp's and
addcdiv's operands to float32 and the result back: the casts are the
kernel's too). Anything else (complex or float64 parameters) does not match
and is lowered as written.
"""

from __future__ import annotations

import dataclasses

import torch

from .adam_counts import counted
from .findings import OptimizerUpdate
from .update_match import (
    call,
    casts_of_type,
    coefficient,
    direction_of,
    is_input,
    is_number,
    kernel_may_run,
    rounded_source,
    scalar_tensor,
    square_average,
    upcast_source,
    write_backs_of,
)

aten = torch.ops.aten
prims = torch.ops.prims

KERNEL = "torch_max_backend_adam_step"
AMSGRAD_KERNEL = "torch_max_backend_adam_amsgrad_step"


def _weight(node: object) -> float | None:
    """The float of ``full([], w)``, else None."""
    if not (isinstance(node, torch.fx.Node) and node.target is aten.full.default):
        return None
    value = node.args[1] if len(node.args) > 1 else None
    return float(value) if is_number(value) else None


def _picked_weight(picked: torch.fx.Node) -> float | None:
    """``w`` of torch's lerp decomposition's ``where(|w| >= 0.5, w - 1, w)``
    (the form our kernel computes: from the nearer end), else None."""
    condition, shifted, weight = picked.args
    w = _weight(weight)
    if (
        w is None
        or not call(shifted, aten.sub.Tensor, 2)
        or shifted.args != (weight, 1)
    ):
        return None
    if not (call(condition, aten.ge.Scalar, 2) and condition.args[1] == 0.5):
        return None
    magnitude = condition.args[0]
    if not (call(magnitude, aten.abs.default, 1) and magnitude.args[0] is weight):
        return None
    return w


def _lerp(node: object) -> tuple[torch.fx.Node, torch.fx.Node, float, list] | None:
    """``(start, end, weight, its nodes)`` of ``lerp(start, end, weight)``:
    the op, or torch's decomposition of it (the weight's two forms picked by
    ``|weight| >= 0.5``, shared by every lerp of one weight, are left as
    they are)."""
    if call(node, aten.lerp.Scalar, 3):
        start, end, weight = node.args
        return (start, end, float(weight), [node]) if is_number(weight) else None
    if not call(node, aten.add.Tensor, 2):
        return None
    if is_input(node.args[0]):
        return _lerp_from_start(node)
    scaled, base = node.args
    if not (call(scaled, aten.mul.Tensor, 2) and call(base, aten.where.self, 3)):
        return None
    picked, diff = scaled.args
    if not (call(diff, aten.sub.Tensor, 2) and call(picked, aten.where.self, 3)):
        return None
    end, start = diff.args
    if base.args[1:] != (end, start) or base.args[0] is not picked.args[0]:
        return None
    weight = _picked_weight(picked)
    if weight is None:
        return None
    return start, end, weight, [node, scaled, base, diff]


def _lerp_from_start(
    node: torch.fx.Node,
) -> tuple[torch.fx.Node, torch.fx.Node, float, list] | None:
    """``(start, end, weight, its nodes)`` of ``start + full_like(diff, weight)
    * diff``, ``diff = end - start``: an unrolled ``_foreach_lerp_``
    (foreach_unroll.py). Our kernel computes a weight under 0.5 so, from the
    start; a larger one from the end, which rounds otherwise."""
    start, scaled = node.args
    if not call(scaled, aten.mul.Tensor, 2):
        return None
    full, diff = scaled.args
    if not (call(diff, aten.sub.Tensor, 2) and diff.args[1] is start):
        return None
    if not (
        call(full, aten.full_like.default, 2, "pin_memory") and full.args[0] is diff
    ):
        return None
    weight = full.args[1]
    if not (is_number(weight) and abs(weight) < 0.5):
        return None
    return start, diff.args[0], float(weight), [node, scaled, full, diff]


def _addcdiv(node: object) -> tuple[object, object, object, list] | None:
    """``(base, numerator, denominator, its nodes)`` of ``base + numerator /
    denominator``: addcdiv with value 1, or torch's decomposition of it."""
    if call(node, aten.addcdiv.default, 3):
        return (*node.args, [node])
    if not call(node, aten.add.Tensor, 2):
        return None
    base, quotient = node.args
    if not call(quotient, aten.div.Tensor, 2):
        return None
    numerator, denominator = quotient.args
    nodes = [node, quotient]
    if call(numerator, aten.mul.Tensor, 2) and numerator.args[1] == 1:
        nodes.append(numerator)
        numerator = numerator.args[0]
    return base, numerator, denominator, nodes


def _largest_second_moment(
    node: object,
) -> tuple[torch.fx.Node, object, torch.fx.Node, list[torch.fx.Node]] | None:
    """``(max_exp_avg_sq, new second moment, new largest, its nodes)`` of
    amsgrad's ``maximum(max_exp_avg_sq, exp_avg_sq')``: the for-loop form
    copies it into a value of the input's (``copy(max_exp_avg_sq, ...)``),
    the unrolled ``_foreach_maximum_`` reads it as it is."""
    largest = node
    nodes = []
    if call(node, aten.copy.default, 2):
        nodes.append(node)
        node = node.args[1]
    if not call(node, aten.maximum.default, 2):
        return None
    state, second = node.args
    if not is_input(state) or (nodes and nodes[0].args[0] is not state):
        return None
    return state, second, largest, [*nodes, node]


def match_adam(new_param: torch.fx.Node) -> OptimizerUpdate | None:
    """The Adam or AdamW update whose new parameter is ``new_param``, if it
    may run as our kernel."""
    # Half-precision values: lerp and addcdiv computed in float32 between
    # casts (torch's decompositions), each cast replaced with the rest.
    casts: list[torch.fx.Node] = []
    found = _addcdiv(rounded_source(new_param, casts))
    if found is None:
        return None
    base, first, denominator, replaced = found
    base = rounded_source(upcast_source(base, casts), casts)
    first = upcast_source(first, casts)
    denominator = upcast_source(denominator, casts)
    if is_input(base):
        param, decay = base, 1.0
    elif call(base, aten.mul.Tensor, 2) and is_input(base.args[0]):
        param, decay = base.args[0], coefficient(base.args[1])
        if decay is None:
            return None
        replaced.append(base)
    else:
        return None
    lerp = _lerp(rounded_source(first, casts))
    if lerp is None:
        return None
    start, end, w1, lerp_nodes = lerp
    exp_avg = upcast_source(start, casts)
    grad = upcast_source(end, casts)
    # The kernel's gradient: the input, before Adam's own weight decay
    # (``grad.add(param, alpha=wd)``) and maximize's negation.
    direction = direction_of(grad, param)
    if direction is None or not is_input(exp_avg):
        return None
    gradient, wd, maximize, direction_nodes = direction
    coupled = call(grad, aten.add.Tensor, 2, "alpha")
    if coupled:
        if decay != 1.0:
            return None  # AdamW's decay too: not the kernel's
        decay = wd
    replaced += direction_nodes
    if not call(denominator, aten.add.Tensor, 2):
        return None
    quotient, b = denominator.args
    if not (call(quotient, aten.div.Tensor, 2) and scalar_tensor(b)):
        return None
    root, a = quotient.args
    if not (call(root, aten.sqrt.default, 1) and scalar_tensor(a)):
        return None
    moment = root.args[0]
    amsgrad = _largest_second_moment(moment)
    if amsgrad is not None:
        largest, moment, new_largest, largest_nodes = amsgrad
        replaced += largest_nodes
    second = square_average(moment, grad)
    if second is None:
        return None
    exp_avg_sq, beta2, w2, second_nodes = second
    new_second = second_nodes[0]
    if not casts_of_type([*casts, *second_nodes], param):
        return None
    replaced += [*lerp_nodes, denominator, quotient, root, *second_nodes, *casts]
    written = [(param, new_param), (exp_avg, first), (exp_avg_sq, new_second)]
    if amsgrad is not None:
        written.append((largest, new_largest))
    write_backs = write_backs_of(written)
    if write_backs is None:
        return None
    update = OptimizerUpdate(
        kernel=KERNEL if amsgrad is None else AMSGRAD_KERNEL,
        written=tuple(state for state, _ in written),
        grad=gradient,
        coefficients=(decay, w1, beta2, w2, a, b),
        write_backs=write_backs,
        replaced=frozenset(replaced),
        kernel_parameters=(
            ("coupled_decay", coupled),
            ("maximize", maximize),
        ),
    )
    if not kernel_may_run(update):
        return None
    return _with_count(update) or update


def _with_count(update: OptimizerUpdate) -> OptimizerUpdate | None:
    """``update`` with its step count and bias corrections in our count
    kernel (passes/adam_counts.py), if they are torch's chain and nothing
    else reads it."""
    a, b = update.coefficients[4:]
    chain = counted(a, b)
    if chain is None:
        return None
    counting = dataclasses.replace(
        update,
        coefficients=(*update.coefficients[:4], *chain.coefficients),
        write_backs=(*update.write_backs, chain.write_back),
        replaced=update.replaced | set(chain.replaced),
        count=chain.count,
    )
    return counting if kernel_may_run(counting) else None
