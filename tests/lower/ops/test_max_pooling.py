"""Max pooling: the family's build check, and adaptive max pooling's
global and evenly dividing windows (decomposed into these lowerings).

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend

from .family_check import check_family


def test_max_pooling_lowerings_build_for_every_opinfo_case():
    check_family("max_pooling")


def test_global_and_dividing_adaptive_max_pooling_match_eager(max_calls):
    # Global max pooling heads (AdaptiveMaxPool2d(1)) ran in PyTorch before;
    # 3-d windows too, and both backward ops.
    def fn(x):
        top, where = F.adaptive_max_pool2d(x, 1, return_indices=True)
        grid, grid_where = F.adaptive_max_pool2d(x, (2, 4), return_indices=True)
        cube = F.adaptive_max_pool3d(x.reshape(2, 3, 4, 2, 8), (2, 1, 4))
        loss = (top * 2).sum() + (grid * grid.detach().sin()).sum() + cube.sum()
        return loss, where, grid_where

    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    x[0, 1, 2, 5] = float("nan")
    x_eager, x_max = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})

    want, got = fn(x_eager), compiled(x_max)
    torch.testing.assert_close(got, want, equal_nan=True)
    want[0].backward()
    got[0].backward()
    torch.testing.assert_close(x_max.grad, x_eager.grad, equal_nan=True)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
