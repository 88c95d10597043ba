"""Grouped convolutions that MAX 26.7's own grouped conv2d sums wrongly.

On the CPU, MAX packs a grouped conv2d's filter by a micro-kernel width chosen
from the output's width and the padding, while its grouped kernel reads the
filter by its default width: where the two differ (padded, 16 or more output
channels a group on AVX2; 32 or more with narrow images on AVX-512) the sums
are wrong without a word. The 2-d cases below were wrong by as much as their
outputs on an AMD EPYC Zen 4 (AVX-512), through MAX's op directly and through
the backend; wav2vec2's 1-d case is in test_convolution.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend

aten = torch.ops.aten

# Refusals are checked as errors, not as fallbacks to PyTorch.
STRICT = {"strict": True}


def _grouped_layers(
    x: torch.Tensor,
    w: torch.Tensor,
    narrow: torch.Tensor,
    narrow_w: torch.Tensor,
    up_w: torch.Tensor,
    grad: torch.Tensor,
    volume: torch.Tensor,
    volume_w: torch.Tensor,
) -> list[torch.Tensor]:
    return [
        # 32 output channels a group on a 12-wide image, padded.
        F.conv2d(x, w, padding=1, groups=2),
        # ResNeXt's last stage in small: 4 groups of 32 on a 7x7 image.
        F.conv2d(narrow, narrow_w, padding=1, groups=4),
        # A transposed convolution is a padded grouped one of its own.
        F.conv_transpose2d(x, up_w, padding=1, groups=2),
        # So is a grouped convolution's input gradient.
        *aten.convolution_backward(
            grad, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 2,
            [True, True, False],
        )[:2],
        # MAX's conv3d packs by its default width: right, and kept so.
        F.conv3d(volume, volume_w, padding=(0, 1, 1), groups=2),
    ]  # fmt: skip


def test_grouped_convolutions_of_32_channels_a_group_match_eager(
    max_calls, graph_texts
):
    torch.manual_seed(0)
    x = torch.randn(1, 64, 12, 12)
    w = torch.randn(64, 32, 3, 3)
    narrow = torch.randn(1, 128, 7, 7)
    narrow_w = torch.randn(128, 32, 3, 3)
    up_w = torch.randn(64, 32, 3, 3)
    grad = torch.randn(1, 64, 12, 12)
    volume = torch.randn(1, 64, 2, 6, 6)
    volume_w = torch.randn(64, 32, 1, 3, 3)
    operands = (x, w, narrow, narrow_w, up_w, grad, volume, volume_w)
    with torch.no_grad():
        expected = _grouped_layers(*operands)
        compiled = torch.compile(_grouped_layers, backend=max_backend, options=STRICT)
        got = compiled(*operands)
    for name, g, e in zip(
        ["conv", "narrow conv", "transposed", "input grad", "weight grad", "conv3d"],
        got,
        expected,
        strict=True,
    ):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-3, msg=name)
    assert max_calls.count == 1
    (text,) = graph_texts()
    # Every grouped convolution is MAX's 3-d one (the 2-d ones over a depth
    # of 1): its filter is packed as its kernel reads it.
    convs = [line for line in text.splitlines() if "rmo.conv(" in line]
    assert len(convs) == 5
    assert all("!mo.tensor<[1, 3, 3, 32," in line for line in convs)
