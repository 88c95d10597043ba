"""Batch, layer, group and weight normalization: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten._native_batch_norm_legit.default",
    "aten._native_batch_norm_legit.no_stats",
    "aten._native_batch_norm_legit_no_training.default",
    "aten._weight_norm_interface_backward.default",
)


def test_normalization_lowerings_build_for_every_opinfo_case():
    check_family("normalization", OUTSIDE_OPINFO)
