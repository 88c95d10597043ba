"""Convolution, pooling and normalization layers of image models, in one graph."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import (
    MAPPING_TORCH_ATEN_TO_MAX,
    UnsupportedOpsError,
    max_backend,
)
from torch_max_backend.lower import conv_choice
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import strategy_for, unsupported_reason

from .family_check import check_family
from .helpers import check_against_eager

# Refusals are checked as errors, not as fallbacks to PyTorch.
STRICT = {"strict": True}


def test_image_model_layers(max_calls):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    strided = torch.nn.Conv2d(
        8, 8, 3, stride=2, padding=(1, 2), dilation=(1, 2), bias=False
    )
    grouped = torch.nn.Conv2d(8, 8, 1, groups=4)
    conv1d = torch.nn.Conv1d(4, 6, 3, padding=1)
    bn = torch.nn.BatchNorm2d(8).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    gn = torch.nn.GroupNorm(2, 8)
    conv3d = torch.nn.Conv3d(
        4, 6, (2, 3, 3), stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1)
    )
    grouped3d = torch.nn.Conv3d(4, 4, 1, groups=2, bias=False)
    # Output padding, groups, dilation and stride of a transposed convolution.
    up = torch.nn.ConvTranspose2d(
        8, 4, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=(1, 2)
    )
    up1d = torch.nn.ConvTranspose1d(4, 3, 4, stride=3, padding=2, bias=False)

    def fn(x, seq, vol):
        h = F.relu(bn(conv(x)))
        return (
            h,
            strided(h),
            grouped(h),
            gn(h),
            F.max_pool2d(h, 2),
            F.max_pool2d(h, 3, stride=2, padding=1),
            F.avg_pool2d(h, 2),
            F.avg_pool2d(h, 3, stride=1, padding=1, count_include_pad=False),
            F.adaptive_avg_pool2d(h, 1),
            F.adaptive_avg_pool2d(h, (4, 2)),
            conv1d(seq),
            conv3d(vol),
            grouped3d(vol),
            up(h),
            up1d(seq),
        )

    with torch.no_grad():
        check_against_eager(
            fn,
            torch.randn(2, 3, 8, 8),
            torch.randn(2, 4, 10),
            torch.randn(1, 4, 5, 6, 4),
            rtol=1e-4,
            atol=1e-4,
        )
    assert max_calls.count == 1


def test_pooling_variants_not_covered_are_reported():
    # Max-pool indices are computed now (training is covered in
    # test_pooling.py); integer average pooling, which torch divides with
    # truncation, is refused, never computed wrong.
    x = torch.arange(32).view(1, 2, 4, 4)
    with pytest.raises(UnsupportedOpsError) as info:
        torch.compile(
            lambda t: F.avg_pool2d(t, 2), backend=max_backend, options=STRICT
        )(x)
    assert "average pooling of torch.int64 tensors" in str(info.value)


def test_convolution_lowerings_build_for_every_opinfo_case():
    check_family("convolution")


def _convolution_node(
    conv: Callable[..., torch.Tensor], *inputs: torch.Tensor, mode: str = "fake"
) -> torch.fx.Node:
    """The aten.convolution node of ``conv`` traced (not built, not compiled)."""
    traced = make_fx(conv, tracing_mode=mode, _allow_non_fake_inputs=True)(*inputs)
    (node,) = [
        n for n in traced.graph.nodes if n.target is torch.ops.aten.convolution.default
    ]
    return node


def _t(*size: int, device: str = "cpu") -> Callable[[], torch.Tensor]:
    """An input made when its case runs, not when the module is collected."""
    return lambda: torch.zeros(size, device=device)


# (case, expected strategy with AVX-512, without, convolution, its inputs):
# the im2col matmul takes ungrouped 1-d and 2-d convolutions on the CPU whose
# filter has 2^20 elements or more or whose output has at most 16x16 pixels;
# of the rest, our tiled kernel takes the float32 ungrouped ones on a CPU
# without AVX-512, MAX's conv2d the others.
CASES = [
    ("2-d 32x32 output", "direct", "tiled", lambda x, w: F.conv2d(x, w, padding=1),
     (_t(1, 3, 32, 32), _t(8, 3, 3, 3))),
    ("2-d 8x8 output", "im2col_matmul", "im2col_matmul", lambda x, w: F.conv2d(x, w, stride=4),
     (_t(1, 8, 32, 32), _t(8, 8, 3, 3))),
    ("2-d 16x16 output", "im2col_matmul", "im2col_matmul", F.conv2d,
     (_t(1, 2, 18, 18), _t(2, 2, 3, 3))),
    ("2-d 17x16 output", "direct", "tiled", F.conv2d, (_t(1, 2, 19, 18), _t(2, 2, 3, 3))),
    ("2-d grouped", "direct", "direct", lambda x, w: F.conv2d(x, w, groups=2),
     (_t(1, 8, 10, 10), _t(8, 4, 3, 3))),
    ("2-d depthwise", "depthwise", "depthwise", lambda x, w: F.conv2d(x, w, groups=8),
     (_t(1, 8, 10, 10), _t(8, 1, 3, 3))),
    ("1-d depthwise", "depthwise", "depthwise", lambda x, w: F.conv1d(x, w, groups=8),
     (_t(1, 8, 10), _t(8, 1, 4))),
    ("2-d depthwise, two outputs a channel", "direct", "direct",
     lambda x, w: F.conv2d(x, w, groups=8), (_t(1, 8, 10, 10), _t(16, 1, 3, 3))),
    ("2-d depthwise off the CPU", "direct", "direct", lambda x, w: F.conv2d(x, w, groups=8),
     (_t(1, 8, 10, 10, device="meta"), _t(8, 1, 3, 3, device="meta"))),
    ("2-d filter of 2^20+", "im2col_matmul", "im2col_matmul", lambda x, w: F.conv2d(x, w, padding=1),
     (_t(1, 512, 32, 32), _t(512, 512, 3, 3))),
    ("1-d 8 outputs", "im2col_matmul", "im2col_matmul", F.conv1d, (_t(2, 4, 10), _t(8, 4, 3))),
    ("1-d 998 outputs", "direct", "tiled", F.conv1d, (_t(1, 4, 1000), _t(8, 4, 3))),
    # A 1-d filter [O, C, k] is built as [O, C, 1, k]: the same element count.
    ("1-d filter of 2^20", "im2col_matmul", "im2col_matmul", F.conv1d,
     (_t(1, 1024, 300), _t(1024, 1024, 1))),
    ("1-d filter under 2^20", "direct", "tiled", F.conv1d,
     (_t(1, 1023, 300), _t(1024, 1023, 1))),
    ("2-d transposed", "transposed", "transposed",
     lambda x, w: F.conv_transpose2d(x, w, stride=2),
     (_t(1, 8, 4, 4), _t(8, 4, 2, 2))),
    ("1-d transposed", "transposed", "transposed", F.conv_transpose1d,
     (_t(1, 8, 4), _t(8, 4, 2))),
    ("3-d with a small output", "conv3d", "conv3d", F.conv3d,
     (_t(1, 1, 4, 4, 4), _t(2, 1, 3, 3, 3))),
    ("2-d 8x8 output off the CPU", "direct", "direct", lambda x, w: F.conv2d(x, w, stride=4),
     (_t(1, 8, 32, 32, device="meta"), _t(8, 8, 3, 3, device="meta"))),
]  # fmt: skip


@pytest.mark.parametrize("avx512", [True, False], ids=["AVX-512", "AVX2"])
@pytest.mark.parametrize(
    ("with_avx512", "without", "conv", "inputs"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_convolution_strategy_is_chosen_where_expected(
    monkeypatch, avx512, with_avx512, without, conv, inputs
):
    monkeypatch.setattr(conv_choice, "cpu_has_avx512", lambda: avx512)
    expected = with_avx512 if avx512 else without
    register_families()
    lower = MAPPING_TORCH_ATEN_TO_MAX[torch.ops.aten.convolution.default]
    node = _convolution_node(conv, *(make() for make in inputs))
    assert unsupported_reason(lower, node) is None
    assert strategy_for(lower, node) == expected


@pytest.mark.parametrize(
    ("height", "expected"), [(32, "im2col_matmul"), (68, "direct")]
)
def test_symbolic_sizes_choose_by_the_traced_output(height, expected):
    # A graph with symbolic spatial sizes picks the strategy of its example
    # (8x8 or 17x17 outputs here); a symbolic filter keeps MAX's kernel.
    register_families()
    lower = MAPPING_TORCH_ATEN_TO_MAX[torch.ops.aten.convolution.default]
    weight = torch.zeros(8, 8, 3, 3)
    x = torch.zeros(2, 8, height, height)
    node = _convolution_node(
        lambda x: F.conv2d(x, weight, stride=4), x, mode="symbolic"
    )
    assert not isinstance(node.meta["val"].shape[2], int)
    assert strategy_for(lower, node) == expected
    node = _convolution_node(
        lambda x, w: F.conv2d(x, w, stride=4), x, weight, mode="symbolic"
    )
    assert strategy_for(lower, node) == "direct"


def test_a_grouped_convolution_of_many_channels_a_group_matches_eager(max_calls):
    """wav2vec2's positional convolution: 64 channels in 4 groups, a 16-wide
    filter padded by 8. MAX's grouped conv2d summed it wrongly without a word."""
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(64, 64, 16, padding=8, groups=4)
    x = torch.randn(2, 64, 78)
    with torch.no_grad():
        expected = conv(x)
        got = torch.compile(conv, backend=max_backend, options=STRICT)(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert max_calls.count == 1
