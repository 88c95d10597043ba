"""Sorting and top-k: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

from .family_check import check_family


def test_sorting_lowerings_build_for_every_opinfo_case():
    check_family("sorting")
