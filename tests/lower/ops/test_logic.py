"""Comparisons, logic, bitwise ops and where: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
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
