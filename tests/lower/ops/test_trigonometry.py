"""Trigonometric and hyperbolic functions: the family's build check, and
float64 accuracy where the float32 sweep cannot see it.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

import torch

from .family_check import check_family
from .helpers import check_against_eager

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = ("aten.atan2.out",)


def test_trigonometry_lowerings_build_for_every_opinfo_case():
    check_family("trigonometry", OUTSIDE_OPINFO)


def test_float64_arctangents_keep_float64_accuracy(max_calls):
    # atan is composed from a float32 polynomial; in float64 its results
    # were 2e-8 off eager's, a hundred million ulps.
    torch.manual_seed(0)
    x = torch.cat([torch.randn(2000) * 3, torch.tensor([0.0, 1e-300, 1e10, -1e300])])
    x = x.double()
    y = torch.randn(x.shape, dtype=torch.float64)

    def fn(x, y):
        return torch.atan(x), torch.atan2(y, x), torch.atan2(x, y)

    check_against_eager(fn, x, y, rtol=1e-14, atol=0.0)
    assert max_calls.count == 1


def test_atan2_keeps_nan_and_signed_zeros(max_calls):
    # A NaN over a zero gave +-pi/2 and two infinities NaN; eager (and C)
    # gives NaN and +-pi/4 or +-3pi/4.
    nan, inf = float("nan"), float("inf")
    y = torch.tensor([nan, nan, 1.0, -0.0, nan, 0.0, -0.0, inf, -inf, 2.0])
    x = torch.tensor([0.0, -0.0, nan, -0.0, 1.0, -0.0, 0.0, -inf, inf, -0.0])
    check_against_eager(torch.atan2, y, x, rtol=0.0, atol=1e-7)
    assert max_calls.count == 1
