"""Convolution, pooling and normalization layers of image models, in one graph."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import UnsupportedOpsError, max_backend

from .helpers import check_against_eager


def test_image_model_layers(max_calls):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    strided = torch.nn.Conv2d(
        8, 8, 3, stride=2, padding=(1, 2), dilation=(1, 2), bias=False
    )
    grouped = torch.nn.Conv2d(8, 8, 1, groups=4)
    conv1d = torch.nn.Conv1d(4, 6, 3, padding=1)
    bn = torch.nn.BatchNorm2d(8).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    gn = torch.nn.GroupNorm(2, 8)

    def fn(x, seq):
        h = F.relu(bn(conv(x)))
        return (
            h,
            strided(h),
            grouped(h),
            gn(h),
            F.max_pool2d(h, 2),
            F.max_pool2d(h, 3, stride=2, padding=1),
            F.avg_pool2d(h, 2),
            F.avg_pool2d(h, 3, stride=1, padding=1, count_include_pad=False),
            F.adaptive_avg_pool2d(h, 1),
            F.adaptive_avg_pool2d(h, (4, 2)),
            conv1d(seq),
        )

    with torch.no_grad():
        check_against_eager(
            fn, torch.randn(2, 3, 8, 8), torch.randn(2, 4, 10), rtol=1e-4, atol=1e-4
        )
    assert max_calls.count == 1


def test_max_pool_indices_needed_by_training_are_reported():
    # The lowering only covers the values; a graph that reads the indices
    # (the backward does) is refused, never computed wrong.
    x = torch.randn(1, 2, 4, 4, requires_grad=True)
    with pytest.raises(UnsupportedOpsError) as info:
        torch.compile(lambda t: F.max_pool2d(t, 2).sum(), backend=max_backend)(x)
    assert "max pooling whose indices are used" in str(info.value)
