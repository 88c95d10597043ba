"""SGD-with-momentum parameter updates, each done by one in-place kernel.

Compiled, torch's single-tensor SGD (torch/optim/sgd.py, the form Dynamo
traces on the CPU) with momentum updates each parameter as::

    d      = grad                          (maximize: -grad; decay: + wd * param)
    buf'   = buf * momentum + d            (dampening: + (1 - dampening) * d)
    step   = buf'                          (nesterov: d + momentum * buf')
    param' = param + (-lr) * step

then AOTAutograd copies the two new values into their inputs. Lowered op by
op that is two stores, each reading its inputs again. Where the parameter
and buffer are read by nothing else, the walk runs our ``sgd_step`` kernel
instead (kernels/mojo_optimizer/sgd_step.mojo): each value read once, the
two written once, in place. Its coefficients are the update's number
arguments, read from the update's numbers input
(builder/optimizer_store.py), so a new learning rate reuses the compiled
graph; maximize's negated gradient is the kernel's too (its ``maximize``).
Multi-tensor nesterov (without weight decay or maximize) adds ``momentum *
buf'`` into the gradient itself, ``_foreach_add_(grads, bufs)``: the
``sgd_direction_step`` kernel stores that direction into the gradient in
the same pass. bfloat16 and float16 parameters take the same kernels,
computed in float32 and rounded after each op as eager's ops round. Anything
else (a tensor learning rate, SGD without momentum: one store already,
float64 or complex parameters) does not match and is lowered as written.
"""

from __future__ import annotations

import torch

from .findings import Coefficient, OptimizerUpdate
from .update_match import (
    call,
    casts_of_type,
    coefficient,
    direction_of,
    is_input,
    kernel_may_run,
    rounded_source,
    scaled_by,
    write_back,
    write_backs_of,
)

aten = torch.ops.aten
ADD = aten.add.Tensor

KERNEL = "torch_max_backend_sgd_step"
# Multi-tensor nesterov's: also stores the step's direction into the gradient.
DIRECTION_KERNEL = "torch_max_backend_sgd_direction_step"


def _buffer_update(
    node: object,
) -> tuple[torch.fx.Node, torch.fx.Node, list[Coefficient], list] | None:
    """``(buf, d, [momentum, 1 - dampening], its nodes)`` of
    ``buf * momentum + (1 - dampening) * d``."""
    if not call(node, ADD, 2, "alpha"):
        return None
    scaled, direction = node.args
    # A half-precision buffer times a float32 number under dynamic=True: the
    # product rounded back by a cast, replaced with it.
    rounding: list[torch.fx.Node] = []
    scaled = rounded_source(scaled, rounding)
    if not (call(scaled, aten.mul.Tensor, 2) and is_input(scaled.args[0])):
        return None
    momentum = coefficient(scaled.args[1])
    damped = scaled_by(node, "alpha")
    if momentum is None or damped is None or not isinstance(direction, torch.fx.Node):
        return None
    if not casts_of_type(rounding, scaled.args[0]):
        return None
    return scaled.args[0], direction, [momentum, damped], [node, scaled, *rounding]


def match_sgd(new_param: torch.fx.Node) -> OptimizerUpdate | None:
    """The SGD-with-momentum update whose new parameter is ``new_param``, if
    it may run as our kernel."""
    if not (call(new_param, ADD, 2, "alpha") and is_input(new_param.args[0])):
        return None
    param, step = new_param.args
    rate = scaled_by(new_param, "alpha")
    found = _buffer_update(step)
    # Plain momentum: the step is the new buffer; nesterov: d + momentum * buf'.
    nesterov: list[Coefficient] = [0.0, 1.0]
    nodes = [new_param]
    if found is None and call(step, ADD, 2, "alpha"):
        found = _buffer_update(step.args[1])
        pull = scaled_by(step, "alpha")
        if found is None or found[1] is not step.args[0] or pull is None:
            return None
        nesterov = [1.0, pull]
        nodes.append(step)
    if found is None or rate is None:
        return None
    buf, d, momentum, buffer_nodes = found
    new_buf = buffer_nodes[0]
    direction = direction_of(d, param)
    if direction is None:
        return None
    grad, decay, maximize, direction_nodes = direction
    written = [(param, new_param), (buf, new_buf)]
    # Multi-tensor nesterov's direction, copied back into the gradient input.
    stores_direction = step is not new_buf and write_back(grad, step) is not None
    if stores_direction:
        written.append((grad, step))
    write_backs = write_backs_of(written)
    if write_backs is None:
        return None
    update = OptimizerUpdate(
        kernel=DIRECTION_KERNEL if stores_direction else KERNEL,
        written=tuple(state for state, _ in written),
        grad=grad,
        coefficients=(decay, *momentum, *nesterov, rate),
        write_backs=write_backs,
        replaced=frozenset([*nodes, *buffer_nodes, *direction_nodes]),
        kernel_parameters=(("maximize", maximize),),
    )
    return update if kernel_may_run(update) else None
