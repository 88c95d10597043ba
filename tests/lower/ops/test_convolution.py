"""Convolution, pooling and normalization layers of image models, in one graph."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import UnsupportedOpsError, max_backend

from .family_check import check_family
from .helpers import check_against_eager

# Refusals are checked as errors, not as fallbacks to PyTorch.
STRICT = {"strict": True}


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
    conv3d = torch.nn.Conv3d(
        4, 6, (2, 3, 3), stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1)
    )
    grouped3d = torch.nn.Conv3d(4, 4, 1, groups=2, bias=False)
    # Output padding, groups, dilation and stride of a transposed convolution.
    up = torch.nn.ConvTranspose2d(
        8, 4, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=(1, 2)
    )
    up1d = torch.nn.ConvTranspose1d(4, 3, 4, stride=3, padding=2, bias=False)

    def fn(x, seq, vol):
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
            conv3d(vol),
            grouped3d(vol),
            up(h),
            up1d(seq),
        )

    with torch.no_grad():
        check_against_eager(
            fn,
            torch.randn(2, 3, 8, 8),
            torch.randn(2, 4, 10),
            torch.randn(1, 4, 5, 6, 4),
            rtol=1e-4,
            atol=1e-4,
        )
    assert max_calls.count == 1


def test_pooling_variants_not_covered_are_reported():
    # Max-pool indices are computed now (training is covered in
    # test_pooling.py); integer average pooling, which torch divides with
    # truncation, is refused, never computed wrong.
    x = torch.arange(32).view(1, 2, 4, 4)
    with pytest.raises(UnsupportedOpsError) as info:
        torch.compile(
            lambda t: F.avg_pool2d(t, 2), backend=max_backend, options=STRICT
        )(x)
    assert "average pooling of torch.int64 tensors" in str(info.value)


def test_transposed_3d_convolution_is_reported():
    up = torch.nn.ConvTranspose3d(2, 2, 2)
    with pytest.raises(UnsupportedOpsError) as info, torch.no_grad():
        torch.compile(up, backend=max_backend, options=STRICT)(
            torch.randn(1, 2, 3, 3, 3)
        )
    assert "3-d transposed convolution" in str(info.value)


def test_convolution_lowerings_build_for_every_opinfo_case():
    check_family("convolution")
