"""Shape, view, indexing and creation lowerings."""

from __future__ import annotations

import torch

from .family_check import check_family
from .helpers import check_against_eager


def test_shape_ops(max_calls):
    def fn(x, idx, table):
        a, b, c = x.split([1, 1, 2], dim=1)
        return (
            x.view(2, -1),
            x.permute(2, 0, 1),
            x.transpose(0, 2),
            x[:, :1].expand(3, 2, 4, 5).flatten(2),
            torch.cat([x, x * 2], dim=-1),
            torch.cat([idx, idx.to(torch.int32)], dim=0),  # promotes to int64
            x[:, 1:3],
            x[..., ::2],
            x[:, -1],
            x[1],
            x.unsqueeze(0).unsqueeze(-1),
            x[:, :1].squeeze(1),
            x[:, :1].squeeze(),
            a + b,
            c.sum(1),
            x.chunk(2, dim=2)[1],
            x[:, idx],  # advanced indexing
            x[idx[1:3], :, idx[:2]],
            torch.nn.functional.embedding(idx.abs(), table),
            torch.index_select(table, 0, idx.abs()),
            table.index_put((idx[1:],), torch.ones(2, 3)),
            table.index_put((idx[[0, 0, 2]],), torch.ones(3, 3), accumulate=True),
            torch.ops.aten.index_put(x, [None, idx[:2]], x[:, :2] * 10),
            torch.ops.aten.index_put(x, [None, idx, idx], x[0, 0, 0] + 7, True),
            torch.arange(5),
            torch.arange(1, 4, 0.5),
            torch.full((2, 3), 1.5),
            torch.zeros_like(x),
            torch.ones(2, 2, dtype=torch.int64),
            x.to(torch.float64),
            idx.float(),
        )

    x = torch.randn(2, 4, 5)
    idx = torch.tensor([3, 0, -1])
    table = torch.randn(6, 3)
    check_against_eager(fn, x, idx, table)
    assert max_calls.count == 1


# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten.copy_.default",
    "aten.lift_fresh_copy.default",
    "aten.reshape.default",
    "prims.convert_element_type.default",
    "prims.copy_strided.default",  # tests/lower/test_strided_copies.py
)


def test_shape_lowerings_build_for_every_opinfo_case():
    check_family("shape", OUTSIDE_OPINFO)
