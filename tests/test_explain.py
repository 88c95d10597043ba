"""explain() names the strategy each node of a multi-strategy op would get."""

from __future__ import annotations

import torch

from torch_max_backend import explain
from torch_max_backend.lower import conv_choice


class Convs(torch.nn.Module):
    """One convolution for each strategy of aten.convolution on the CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = torch.nn.Conv2d(3, 8, 3, padding=1)  # 32x32 output: direct
        self.small = torch.nn.Conv2d(8, 8, 3, stride=4)  # 8x8 output: im2col
        self.up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.volume = torch.nn.Conv3d(1, 2, 3, padding=1)

    def forward(self, x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = self.small(self.wide(x))
        return self.up(y), self.volume(v)


def test_explain_shows_the_strategy_each_convolution_gets(max_calls):
    model = Convs().eval()
    x, v = torch.randn(1, 3, 32, 32), torch.randn(1, 1, 4, 4, 4)
    with torch.no_grad():
        report = explain(model, x, v)
    (graph,) = report.graphs
    (conv,) = [op for op in graph.ops if op.op == "aten.convolution.default"]
    assert conv.on_max and conv.count == 4
    assert conv.strategies == {
        "direct" if conv_choice.cpu_has_avx512() else "tiled": 1,
        "im2col_matmul": 1,
        "transposed": 1,
        "conv3d": 1,
    }
    assert "im2col_matmul x1" in report.table()
    assert report.as_dict()["graphs"][0]["ops"][0]["strategies"] is not None
    assert max_calls.count == 0  # explain runs nothing on MAX
