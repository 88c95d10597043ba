"""Reductions over one, several and all dims, with and without keepdim."""

from __future__ import annotations

import torch

from .family_check import check_family
from .helpers import check_against_eager


def test_reductions(max_calls):
    def fn(x, i):
        return (
            x.sum(),
            x.sum(1),
            x.sum((0, 2), keepdim=True),
            i.sum(-1),  # int sums stay integral (int64)
            x.mean(),
            x.mean(-1, keepdim=True),
            x.amax(1),
            x.amin((0, 1)),
            x.var(1),
            x.var(-1, correction=0, keepdim=True),
            (x > 0).any(-1),
            (x > 3).any(),
            torch.cumsum(x, 1),
            torch.cumsum(i, 0),
        )

    x = torch.randn(3, 4, 5)
    i = torch.arange(60, dtype=torch.int32).reshape(3, 4, 5)
    check_against_eager(fn, x, i)
    assert max_calls.count == 1


# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten.linalg_vector_norm.default",
    "aten.prod.dim_int",
    "aten.var.dim",
    "aten.var_mean.correction",
)


def test_reduction_lowerings_build_for_every_opinfo_case():
    check_family("reduction", OUTSIDE_OPINFO)


def test_extremes_of_infinities_and_nans_as_in_eager(max_calls):
    # MAX's max and min reductions start from the lowest (highest) finite
    # value and skip NaNs; torch's give -inf (inf) over infinities alone and
    # NaN over a row holding one, whose index is the first NaN's.
    def fn(x):
        return (
            x.amax(-1),
            x.amin(-1),
            x.max(-1),
            x.min(-1),
            x.amax(),
            x.argmax(-1),
            x.argmin(-1),
            x.argmax(),
            torch.linalg.vector_norm(x, float("inf"), -1),
            torch.linalg.vector_norm(x, float("-inf"), -1),
        )

    lowest = torch.finfo(torch.float32).min
    x = torch.randn(6, 5)
    x[0] = float("-inf")
    x[1] = float("inf")
    x[2, 3] = float("nan")
    x[3] = torch.tensor([lowest, float("-inf"), lowest, float("-inf"), lowest])
    x[4, 1] = float("-inf")
    check_against_eager(fn, x)
    assert max_calls.count == 1


def test_max_and_min_of_all_elements_as_in_eager(max_calls):
    # Tensor.max() and .min(), a non-core op of their own: NaN wins, int64
    # beyond float64's integers and bool keep their exact values.
    floats = torch.tensor([[1.0, -float("inf")], [3.0, 0.5]])
    with_nan = torch.tensor([1.0, float("nan"), 5.0])
    big = torch.tensor([2**53 + 1, 2**53, -(2**62)], dtype=torch.int64)
    flags = torch.tensor([False, True, False])
    masks = torch.tensor([[False, True, True], [False, False, False]])

    def fn(floats, with_nan, big, flags, masks):
        return (
            floats.max(),
            floats.min(),
            with_nan.max(),
            with_nan.min(),
            big.max(),
            big.min(),
            flags.max(),
            flags.min(),
            # Along an inner axis, bool's reduction failed MAX's compile.
            masks.max(1),
            masks.min(1),
            masks.amax(1),
        )

    check_against_eager(fn, floats, with_nan, big, flags, masks)
    assert max_calls.count == 1


def test_half_precision_reductions_accumulate_in_float32_as_in_eager(max_calls):
    # torch adds float16 and bfloat16 values in float32 and rounds once;
    # rounding at every step put float16 sums of 4096 values 20x further off.
    torch.manual_seed(0)
    h = torch.randn(8, 4096).to(torch.float16)
    b = (torch.randn(8, 4096) + 3).to(torch.bfloat16)

    def fn(h, b):
        return (
            h.sum(-1),
            h.mean(-1),
            h.sum(),
            h.var(-1),
            h.norm(dim=-1),
            h.cumsum(-1)[:, -1],
            torch.var_mean(h, -1)[0],
            b.sum(0),
            b.mean(),
        )

    check_against_eager(fn, h, b, rtol=1e-3, atol=1e-3)
    assert max_calls.count == 1
