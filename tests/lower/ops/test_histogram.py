"""histc (lower/ops/histogram.py): the family's build check, and eager's
bins and edges: the top value in the last bin, values outside the range
and NaN not counted, the input's own range when min == max."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import max_backend

from .family_check import check_family


def test_histogram_lowerings_build_for_every_opinfo_case():
    check_family("histogram", ("aten.histc.default",))


def _histograms(x: torch.Tensor, experts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (
        torch.histc(x, bins=7, min=-1.0, max=2.5),  # edges, outside, NaN
        torch.histc(x.nan_to_num(0.0), bins=10),  # the input's own range
        torch.histc(experts.float(), bins=4, min=0, max=3),  # a router's counts
        torch.histc(torch.full((5,), 3.0), bins=3),  # one value: widened by 1
    )


def test_histc_counts_as_eager(max_calls):
    compiled = torch.compile(_histograms, backend=max_backend, options={"strict": True})
    torch.manual_seed(0)
    x = torch.randn(300) * 2
    x[:4] = torch.tensor([-1.0, 2.5, float("nan"), 3.0])
    experts = torch.randint(0, 4, (64, 2))
    for got, want in zip(compiled(x, experts), _histograms(x, experts), strict=True):
        torch.testing.assert_close(got, want)
    assert max_calls.count == 1


def test_a_range_that_is_not_finite_raises_eager_s_error():
    compiled = torch.compile(
        lambda x: torch.histc(x, bins=4), backend=max_backend, options={"strict": True}
    )
    torch.testing.assert_close(
        compiled(torch.arange(8.0)), torch.histc(torch.arange(8.0), bins=4)
    )
    with pytest.raises(RuntimeError, match="not finite"):
        compiled(torch.tensor([0.0, float("inf"), 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
