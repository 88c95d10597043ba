"""median, nanmedian and kthvalue against eager: values and indices, NaN
rows, dims and keepdim, integers, ties' values; and their gradients' graphs."""

from __future__ import annotations

import torch

from torch_max_backend import explain

from .family_check import check_family
from .helpers import check_against_eager

nan = float("nan")


def _statistics(x: torch.Tensor, ints: torch.Tensor, ties: torch.Tensor):
    return (
        *x.median(1),
        *x.median(0, keepdim=True),
        *x[[0, 1, 3]].nanmedian(1),
        # A row of NaNs only: NaN; which NaN's index torch gives is whatever
        # its selection left there (nanmedian: 0, 0, 0, 2, 2, 3, 5 for rows
        # of 1 to 7), so not compared.
        x.nanmedian(1).values,
        *x.nanmedian(-2),
        *x[[0, 1, 3]].kthvalue(3, 1),
        *x[[0, 1, 3]].kthvalue(5, 1, keepdim=True),
        x.kthvalue(3, 1).values,
        *x.kthvalue(1, 0),
        x.median(),
        x.nanmedian(),
        x[1:].median(),
        *ints.median(0),
        *ints.kthvalue(2, -1),
        ints.median(),
        # Which of equal values torch's selection returns is not fixed either.
        ties.median(1).values,
        ties.kthvalue(2, 1).values,
        *x[0, 0].median(0),
    )


def test_order_statistics_match_eager():
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    # A row with two NaNs (median: the first NaN's index; kthvalue past the
    # values: the NaNs in order), one of NaNs only, a column with one NaN.
    x[0, 1] = x[0, 3] = nan
    x[2] = nan
    ints = torch.stack([torch.randperm(6) - 3 for _ in range(3)])
    ties = torch.tensor([[2.0, 1.0, 2.0, 1.0], [0.0, 0.0, 0.0, 3.0]])
    check_against_eager(_statistics, x, ints, ties)


def test_median_trains_on_max():
    weight = torch.nn.Parameter(torch.randn(6, 6))
    report = explain(
        lambda x: (
            (x @ weight).median(1).values.sum() + (x @ weight).kthvalue(2).values.sum()
        ),
        torch.randn(4, 6),
        training=True,
    )
    assert report.unsupported == {}


def test_order_statistics_lowerings_build_for_every_opinfo_case():
    check_family(
        "order_statistics",
        (
            "aten.median.default",
            "aten.median.dim",
            "aten.nanmedian.default",
            "aten.nanmedian.dim",
            "aten.kthvalue.default",
        ),
    )
