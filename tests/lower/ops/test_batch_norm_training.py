"""Training-mode batch norm: its statistics in as few passes as the layout allows.

A batch norm's mean and variance over N, H, W were built as one MAX
reduction per axis (three for the mean, three more for the variance's own
mean, three for its sum of squares), each over a non-inner axis of an NCHW
copy. They now read the value the NCHW one permutes, once per statistic:
MAX's convolution's channels-last result as [N*H*W, C] rows, or a product
convolution's [C, N*H*W] rows; and the backward's per-channel sums reduce
H*W rows first, then N.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F

from .helpers import check_training_step


class ConvBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return (h * h).mean()


def _reductions(text: str, kind: str) -> list[tuple[str, str]]:
    """(axis, input shape) of each MAX reduction of ``kind`` in a graph's text."""
    return re.findall(
        rf"rmo\.mo\.reduce\.{kind}\(%\w+\) \[axis = (\d+)\] : \(!mo\.tensor<\[([\d, ]+)\]",
        text,
    )


def test_batch_norm_statistics_read_channels_last_rows(max_calls, graph_texts):
    torch.manual_seed(0)
    # 20x20 pixels: MAX's conv kernel (NHWC); 10x10: im2col's product (CNHW).
    check_training_step(ConvBlocks(), torch.randn(2, 3, 20, 20))

    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
    forward, backward = graph_texts()
    # Per batch norm one mean (shared by the variance) and one sum of
    # squares; the loss's mean is over everything at once.
    rows = [("0", "800, 8"), ("1", "8, 200")]
    assert _reductions(forward, "mean") == [*rows, ("0", "1600")]
    # (A small product's own sum over K may be there too.)
    sums = _reductions(forward, "add")
    assert all(sums.count(row) == 1 for row in rows), sums
    assert all(_rank(shape) <= 3 for _, shape in sums), sums
    # The backward's per-channel sums: rows of H*W first (inner), then N
    # over what is left; never a pass per axis over whole images.
    sums = _reductions(backward, "add")
    assert ("2", "2, 8, 400") in sums, sums
    assert ("0", "2, 8, 1, 1") in sums, sums
    assert all(_rank(shape) <= 3 or _numel(shape) <= 16 for _, shape in sums), sums


def _rank(shape: str) -> int:
    return len(shape.split(","))


def _numel(shape: str) -> int:
    return math.prod(int(d) for d in shape.split(","))
