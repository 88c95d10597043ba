"""Sorting and top-k: the family's build check, and stable sorts.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds, and that a
stable sort keeps equal values in their order, as eager's does.
"""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import max_backend

from .family_check import check_family
from .helpers import check_against_eager

NAN, INF = float("nan"), float("inf")


def test_stable_sorts_keep_equal_values_in_order(max_calls):
    # sort.stable ran in PyTorch, splitting the graph around it.
    def fn(x, labels, h):
        return (
            *torch.sort(x, stable=True),
            *torch.sort(x, stable=True, descending=True, dim=0),
            torch.argsort(labels, stable=True),
            torch.argsort(labels, stable=True, descending=True),
            *torch.sort(h, stable=True, dim=-1),
        )

    x = torch.tensor([
        [1.0, NAN, -0.0, 0.0, 3.0, -INF, 1.0, NAN, INF, 0.0, 2e-38, 1.0],
        [2.0, 2.0, 2.0, -1.0, -1.0, INF, INF, 1e-30, 0.0, -0.0, 2.0, 3.4e38],
    ])  # fmt: skip
    labels = torch.tensor([3, 1, 3, 0, 1, 1, 3, 0, -7, 2**31 - 1], dtype=torch.int32)
    h = torch.tensor([[0.5, 0.25, 0.5, 0.5, 0.25, 0.5, 0.125, 0.5]] * 2)
    check_against_eager(fn, x, labels, h.to(torch.bfloat16))
    assert max_calls.count == 1


def test_stable_sorts_of_64_bit_values_say_why_they_run_in_pytorch():
    compiled = torch.compile(lambda x: torch.sort(x, stable=True), backend=max_backend)
    with pytest.warns(Warning, match=r"sort\.stable.*int64 \(no room in the key"):
        compiled(torch.tensor([3, 1, 3, 0]))


def test_sorting_lowerings_build_for_every_opinfo_case():
    check_family(
        "sorting",
        ("aten.sort.stable", "aten.searchsorted.Tensor", "aten.searchsorted.Scalar"),
    )


def _searches(bins, batched_bins, values, ints):
    return (
        torch.searchsorted(bins, values),
        torch.searchsorted(bins, values, right=True),
        torch.searchsorted(bins, values, side="right", out_int32=True),
        torch.searchsorted(batched_bins, values),
        torch.searchsorted(bins, 0.25),
        torch.searchsorted(bins, ints),
        torch.bucketize(values, bins),
    )


def test_searchsorted_matches_eager():
    # NeRF's importance sampling and histogram code search sorted bins:
    # values on the bins (left and right sides differ), past both ends,
    # NaN (past the end, as torch's binary search leaves it), integers.
    torch.manual_seed(0)
    bins = torch.tensor([-1.0, 0.0, 0.25, 0.25, 1.0, 3.0])
    batched_bins = torch.sort(torch.randn(4, 7), -1).values
    values = torch.randn(4, 9) * 2
    values[0, :4] = torch.tensor([0.25, -1.0, 3.0, float("nan")])
    ints = torch.tensor([[-2, 0, 1, 5]])
    check_against_eager(_searches, bins, batched_bins, values, ints)
