"""Grid sampling and col2im: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = ("aten.col2im.default",)


def test_resampling_lowerings_build_for_every_opinfo_case():
    check_family("resampling", OUTSIDE_OPINFO)
