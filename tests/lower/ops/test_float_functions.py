"""exp2, hypot, fmax, fmin and round to decimals: the family's build check,
and their results at the edges against eager (the OpInfo sweep compares
ordinary values)."""

from __future__ import annotations

import torch

from .family_check import check_family
from .helpers import check_against_eager


def test_float_function_lowerings_build_for_every_opinfo_case():
    check_family("float_functions")


def test_float_functions_match_eager_at_nans_infinities_and_extremes(max_calls):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([100.0, -100.0, 0.5, nan, inf, -inf, 1e20, 0.0, -3.0, 2.5])
    y = torch.tensor([-3.0, 1e-30, nan, 2.0, nan, 1.0, 1e20, 0.0, nan, nan])
    # Ties of each rounding, eager's half to even after scaling.
    r = torch.tensor([2.5, 3.5, -2.5, 1.25, 1.35, 1234.5, 1250.0, -0.45, nan, inf])
    ints = torch.tensor([3, -7, 0, 12, 5, -1, 4, 9, -2, 8])

    def fn(x, y, r, ints):
        return (
            torch.exp2(x),
            torch.exp2(ints),
            torch.hypot(x, y),
            torch.hypot(y, x),
            torch.fmax(x, y),
            torch.fmin(x, y),
            torch.fmax(ints, ints.flip(0)),
            torch.fmin(ints, torch.full_like(ints, 2)),
            torch.round(r, decimals=0),
            torch.round(r, decimals=1),
            torch.round(r, decimals=-2),
            torch.round(r, decimals=3),
        )

    check_against_eager(fn, x, y, r, ints, rtol=1.3e-6, atol=0.0)
    assert max_calls.count == 1
