"""Embeddings and embedding bags: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten._embedding_bag.default",
    "aten._embedding_bag_backward.default",
    "aten._embedding_bag_forward_only.default",
    "aten._embedding_bag_per_sample_weights_backward.default",
    "aten.embedding_dense_backward.default",
)


def test_embedding_lowerings_build_for_every_opinfo_case():
    check_family("embedding", OUTSIDE_OPINFO)
