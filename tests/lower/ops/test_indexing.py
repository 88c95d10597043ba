"""Indexing (index, index_put, ...): the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds, and that
outer-product indexing (interpolation's) gathers dim by dim.
"""

from __future__ import annotations

import torch

from torch_max_backend.lower.builder import build_graph

from ..aten_graphs import aten_graphs
from .family_check import check_family
from .helpers import check_against_eager


def test_indexing_lowerings_build_for_every_opinfo_case():
    check_family("indexing")


def _outer_products(
    x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, patch: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    return (
        x[:, rows[:, None], cols],  # one index per dim, broadcast as an outer product
        x[..., cols],  # one 1-D index
        x[:, patch],  # one 2-D index
        x[rows[:, None], :, cols],  # dims apart: the broadcast dims come first
        x[:, rows, cols[:3]],  # indices zipped, not an outer product
    )


def test_outer_product_indices_gather_each_dim_on_its_own():
    x = torch.randn(5, 5, 6)
    rows = torch.tensor([4, -1, 0])  # negative ones count from the end
    cols = torch.tensor([5, 0, -6, 3, 1])
    patch = torch.tensor([[0, 4], [-2, 1]])
    check_against_eager(_outer_products, x, rows, cols, patch)
    text = str(build_graph(aten_graphs(_outer_products, x, rows, cols, patch)[0]).graph)
    # Only the last two (not outer products) need index vectors.
    assert text.count("gather_nd") == 2, text
