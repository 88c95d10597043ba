"""Activations and their backward ops: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten._log_softmax_backward_data.default",
    "aten.elu_backward.default",
    "aten.gelu_backward.default",
    "aten.hardtanh_backward.default",
    "aten.leaky_relu_backward.default",
    "aten.sigmoid_backward.default",
    "aten.silu_backward.default",
    "aten.softshrink_backward.default",
    "aten.tanh_backward.default",
    "aten.threshold_backward.default",
)


def test_activation_lowerings_build_for_every_opinfo_case():
    check_family("activation", OUTSIDE_OPINFO)
