"""Backward ops of losses lowered as eager computes them: the family's
build check, and their gradients against eager where the pieces meet.

Their NaN behaviour is checked in test_nan_propagation.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend

from .family_check import check_family

# No core OpInfo case reaches a backward op.
OUTSIDE_OPINFO = ("aten.smooth_l1_loss_backward.default",)


def test_loss_backward_lowerings_build_for_every_opinfo_case():
    check_family("loss_backward", OUTSIDE_OPINFO)


def test_smooth_l1_loss_and_softshrink_gradients_match_eager_at_their_edges(
    max_calls,
):
    # Lowered as eager computes them (not torch's decompositions): inputs on
    # the edges, x - target = +-beta and x = +-lambd, where the pieces meet.
    def fn(x, target):
        return (
            F.smooth_l1_loss(x, target, beta=0.5)
            + F.smooth_l1_loss(x, target, beta=0.0, reduction="sum")
            + F.smooth_l1_loss(x, target, beta=2.0, reduction="none").pow(2).sum()
            + F.softshrink(x, 0.5).sum()
        )

    torch.manual_seed(0)
    x = torch.randn(4, 6)
    x[0, :4] = torch.tensor([0.5, -0.5, 0.0, 2.0])
    target = torch.randn(4, 6)
    target[0, :4] = 0.0
    x_eager, t_eager = x.clone().requires_grad_(), target.clone().requires_grad_()
    x_max, t_max = x.clone().requires_grad_(), target.clone().requires_grad_()
    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})

    want = torch.autograd.grad(fn(x_eager, t_eager), (x_eager, t_eager))
    got = torch.autograd.grad(compiled(x_max, t_max), (x_max, t_max))
    torch.testing.assert_close(got, want)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
