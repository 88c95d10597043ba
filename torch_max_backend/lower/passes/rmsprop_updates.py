"""RMSprop parameter updates, each done by one in-place kernel.

Compiled, torch's single-tensor RMSprop (torch/optim/rmsprop.py) without
momentum and not centered updates each parameter as::

    d           = grad                       (maximize: -grad; decay: + wd * param)
    square_avg' = copy(mul(square_avg, alpha), fma(d * d, 1 - alpha, mul(square_avg, alpha)))
    param'      = copy(param, fma(d / (sqrt(square_avg') + eps), -lr, param))

and the multi-tensor form, its list ops unrolled (foreach_unroll.py), the
same with ``add`` and ``mul`` for the fused multiply-adds; then AOTAutograd
copies the two new values into their inputs. Lowered op by op that is two
stores, each reading its inputs again. Where the parameter and its square
average are read by nothing else, the walk runs our ``rmsprop_step``
kernel instead (kernels/mojo_optimizer/rmsprop_step.mojo): each value read
once, the two written once, in place, float32 or half-precision values.
RMSprop with momentum or centered, and anything else, does not match and is
lowered as written.
"""

from __future__ import annotations

import torch

from .findings import OptimizerUpdate
from .update_match import (
    call,
    casts_of_type,
    coefficient,
    direction_of,
    is_input,
    kernel_may_run,
    rounded_source,
    square_average,
    write_backs_of,
)

aten = torch.ops.aten
prims = torch.ops.prims

KERNEL = "torch_max_backend_rmsprop_step"


def _step(new_param: torch.fx.Node) -> tuple[object, object, object, list] | None:
    """``(param, quotient, rate, its nodes)`` of ``param + rate * quotient``:
    the for-loop form's ``copy(param, fma(quotient, rate, param))`` or the
    unrolled ``_foreach_addcdiv``'s ``add(param, mul(quotient, rate))``."""
    if call(new_param, aten.copy.default, 2):
        param, fma = new_param.args
        if not (call(fma, prims.fma.default, 3) and fma.args[2] is param):
            return None
        quotient, rate = fma.args[:2]
        return param, quotient, rate, [new_param, fma]
    if call(new_param, aten.add.Tensor, 2):
        param, scaled = new_param.args
        if not call(scaled, aten.mul.Tensor, 2):
            return None
        quotient, rate = scaled.args
        return param, quotient, rate, [new_param, scaled]
    return None


def match_rmsprop(new_param: torch.fx.Node) -> OptimizerUpdate | None:
    """The RMSprop update whose new parameter is ``new_param``, if it may
    run as our kernel."""
    found = _step(new_param)
    if found is None:
        return None
    param, quotient, rate, nodes = found
    if not (is_input(param) and call(quotient, aten.div.Tensor, 2)):
        return None
    rate = coefficient(rate)
    if rate is None:
        return None
    d, average = quotient.args
    # Under dynamic=True eps is a float32 tensor: the sum cast back to the
    # values' type.
    casts: list[torch.fx.Node] = []
    average = rounded_source(average, casts)
    if not call(average, aten.add.Tensor, 2):
        return None
    root, eps = average.args
    eps = coefficient(eps)
    if not call(root, aten.sqrt.default, 1) or eps is None:
        return None
    new_average = root.args[0]
    square = square_average(new_average, d)
    direction = direction_of(d, param)
    if square is None or direction is None:
        return None
    square_avg, alpha, weight, square_nodes = square
    grad, decay, maximize, direction_nodes = direction
    replaced = [*nodes, quotient, average, root, *square_nodes, *direction_nodes]
    replaced += casts
    if not casts_of_type(replaced, param):
        return None
    written = [(param, new_param), (square_avg, new_average)]
    write_backs = write_backs_of(written)
    if write_backs is None:
        return None
    update = OptimizerUpdate(
        kernel=KERNEL,
        written=tuple(state for state, _ in written),
        grad=grad,
        coefficients=(decay, alpha, weight, eps, rate),
        write_backs=write_backs,
        replaced=frozenset(replaced),
        kernel_parameters=(("maximize", maximize),),
    )
    return update if kernel_may_run(update) else None
