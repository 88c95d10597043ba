"""Comparisons, logic, bitwise ops and where: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

import pytest
import torch

from .family_check import check_family
from .helpers import check_against_eager

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten._assert_async.msg",  # test_one_hot_checks_its_classes below
    "aten.bitwise_and.Scalar",
    "aten.bitwise_or.Scalar",
    "aten.bitwise_xor.Scalar",
    "aten.bitwise_xor.Tensor",
    "aten.masked_fill.Tensor",
    "aten.where.Scalar",
    "aten.where.ScalarOther",
    "aten.where.ScalarSelf",
)


def test_logic_lowerings_build_for_every_opinfo_case():
    check_family("logic", OUTSIDE_OPINFO)


def test_one_hot_checks_its_classes(max_calls):
    # one_hot's decomposition asserts its class range (aten._assert_async),
    # which ran in PyTorch and split the graph in two.
    def fn(t):
        return torch.nn.functional.one_hot(t, 5) * 2

    check_against_eager(fn, torch.tensor([0, 4, 2, 1]))
    assert max_calls.count == 1
    compiled = torch.compile(fn, backend="max")
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_"):
        compiled(torch.tensor([0, 5, 1, 1]))
