"""Backward ops of pooling: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten.adaptive_max_pool2d_backward.default",
    "aten.adaptive_max_pool3d_backward.default",
    "aten._adaptive_avg_pool2d_backward.default",
    "aten._adaptive_avg_pool3d_backward.default",
    "aten.avg_pool2d_backward.default",
    "aten.avg_pool3d_backward.default",
    "aten.max_pool3d_with_indices_backward.default",
)


def test_pooling_backward_lowerings_build_for_every_opinfo_case():
    check_family("pooling_backward", OUTSIDE_OPINFO)
