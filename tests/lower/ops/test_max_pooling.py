"""Max pooling: the family's build check, 2-d pooling with indices by our
kernel (values, indices and the gradient), and adaptive max pooling over
global, evenly dividing and uneven windows, with its gradient.

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


def test_adaptive_max_pooling_matches_eager(max_calls):
    # Global max pooling heads (AdaptiveMaxPool2d(1)), 3-d windows, and
    # windows that do not divide the input (8 into 3 or 5: lengths 3 and 4,
    # overlapping), which ran in PyTorch before; ties after rounding (the
    # first maximum), unbatched input, and both backward ops.
    def fn(x):
        top, where = F.adaptive_max_pool2d(x, 1, return_indices=True)
        grid, grid_where = F.adaptive_max_pool2d(x, (2, 4), return_indices=True)
        cube = F.adaptive_max_pool3d(x.reshape(2, 3, 4, 2, 8), (2, 1, 4))
        uneven, uneven_where = F.adaptive_max_pool2d(x, (3, 5), return_indices=True)
        odd_cube = F.adaptive_max_pool3d(x.reshape(2, 3, 4, 2, 8), (3, 2, 3))
        tied, tied_where = F.adaptive_max_pool2d(
            (x * 2).round(), (3, 3), return_indices=True
        )
        single = F.adaptive_max_pool2d(x[0], (5, 3))
        loss = (top * 2).sum() + (grid * grid.detach().sin()).sum() + cube.sum()
        loss = loss + (uneven * uneven.detach().cos()).sum() + odd_cube.sum()
        loss = loss + single.square().sum()
        return loss, where, grid_where, uneven_where, tied, tied_where

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


def test_max_pooling_with_indices_by_our_kernel(max_calls, graph_texts):
    # A training step's 2-d pooling keeps its indices for the backward: on
    # the CPU our kernel computes values and indices in one pass (channels
    # not a multiple of a vector: 13; ties after rounding, where the first
    # maximum wins; a NaN over any number; a window of -inf at its first
    # position; padding, strides, dilation, unbatched input), and its
    # backward adds overlapping windows' gradients in torch's order.
    def fn(x):
        pooled, where = F.max_pool2d(x, 3, 2, 1, return_indices=True)
        dilated, dilated_where = F.max_pool2d(
            x, (2, 3), (1, 2), 1, (2, 1), return_indices=True
        )
        single, single_where = F.max_pool2d(x[1], 2, 1, return_indices=True)
        loss = (pooled * pooled.detach().cos()).sum() + dilated.sum() * 2
        loss = loss + single.square().sum()
        return loss, pooled, where, dilated_where, single_where

    torch.manual_seed(0)
    x = (torch.randn(2, 13, 9, 11) * 2).round()
    x[0, 1, 2, 5] = float("nan")
    x[1, 4, :3, :3] = float("-inf")
    x_eager, x_max = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})

    want, got = fn(x_eager), compiled(x_max)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    want[0].backward()
    got[0].backward()
    torch.testing.assert_close(x_max.grad, x_eager.grad, equal_nan=True)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
    forward, backward = graph_texts()
    assert forward.count('"torch_max_backend_max_pool2d"') == 3
    assert backward.count('"torch_max_backend_max_pool2d_backward"') == 3
