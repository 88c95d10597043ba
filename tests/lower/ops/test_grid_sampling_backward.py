"""grid_sampler_2d's gradients (input and grid) against eager autograd's,
for every mode, padding and corner alignment it lowers."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import explain, max_backend

from .family_check import check_family

aten = torch.ops.aten

# torch's enums: interpolation bilinear 0, nearest 1; padding zeros 0,
# border 1, reflection 2.
MODES = [
    (0, 0, False),
    (0, 0, True),
    (0, 1, False),
    (0, 2, False),
    (0, 2, True),
    (1, 0, False),
    (1, 1, True),
]


def _grads(g: torch.Tensor, x: torch.Tensor, grid: torch.Tensor) -> list:
    grads = []
    for mode, padding, align in MODES:
        grads += aten.grid_sampler_2d_backward(
            g, x, grid, mode, padding, align, [True, True]
        )
    # The input's gradient alone, as when the grid is a constant.
    alone = aten.grid_sampler_2d_backward(g, x, grid, 0, 0, False, [True, False])
    return [*grads, alone[0]]


def test_grid_sampling_gradients_match_eager(max_calls):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6)
    # Past [-1, 1] on every side, so that padding and clamping are reached;
    # two positions fall on one pixel more often than not (5x6 read by 7x4).
    grid = torch.rand(2, 7, 4, 2) * 2.8 - 1.4
    g = torch.randn(2, 3, 7, 4)
    compiled = torch.compile(_grads, backend=max_backend, options={"strict": True})
    got, want = compiled(g, x, grid), _grads(g, x, grid)
    for i, (a, e) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(
            a, e, atol=1e-4, rtol=1e-4, msg=lambda m, i=i: f"{i}: {m}"
        )
    assert max_calls.of("inference") == 1


class _Transformer(torch.nn.Module):
    """A spatial transformer: a learned affine warp of the image."""

    def __init__(self) -> None:
        super().__init__()
        self.theta = torch.nn.Linear(12, 6)
        self.conv = torch.nn.Conv2d(3, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        theta = self.theta(x.mean((1, 2)).flatten(1)[:, :12]).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(self.conv(x), grid, align_corners=False).sum()


def test_spatial_transformer_trains_on_max():
    report = explain(_Transformer(), torch.randn(2, 3, 6, 12), training=True)
    ops = {op.op for graph in report.graphs for op in graph.ops}
    assert "aten.grid_sampler_2d_backward.default" in ops
    assert report.unsupported == {}


def test_grid_sampling_backward_lowerings_build_for_every_opinfo_case():
    check_family("grid_sampling_backward", ("aten.grid_sampler_2d_backward.default",))
