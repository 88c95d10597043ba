"""Arg reductions: the index of the first extreme, NaN first, as torch gives it."""

from __future__ import annotations

import torch

from .family_check import check_family
from .helpers import check_against_eager


def test_arg_reductions(max_calls):
    def fn(x, i, flags):
        return (
            x.argmax(1),
            x.argmin(-1, keepdim=True),
            x.argmax(),
            x.max(0),
            x.min(2, keepdim=True),
            i.argmax(-1),  # ties: the first index
            flags.max(-1),  # bool values, int64 indices
            x[:, :1].argmin(1),  # one element along the axis
        )

    x = torch.randn(3, 4, 5)
    x[1, 2, 3] = float("nan")
    i = torch.tensor([[3, 7, 7, 1], [2, 2, 0, 2]], dtype=torch.int32)
    flags = torch.tensor([[False, True, True], [False, False, False]])
    check_against_eager(fn, x, i, flags)
    assert max_calls.count == 1


def test_arg_reduction_lowerings_build_for_every_opinfo_case():
    check_family("arg_reduction")
