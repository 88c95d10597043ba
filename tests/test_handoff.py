"""Ops that read storage through strides see eager PyTorch's layout.

MAX returns contiguous tensors. ``as_strided`` of a value eager PyTorch holds
transposed reads its elements in storage order: on MAX the lowering follows
torch's meta, and in PyTorch (after a MAX block) the value is laid out again.
"""

from __future__ import annotations

import pytest
import torch

import torch_max_backend.pipeline.fallback as fallback_module
import torch_max_backend.pipeline.graph_builds as graph_builds
from torch_max_backend import max_backend
from torch_max_backend.pipeline.fallback import FallbackWarning


def strided_reads(x: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # y is a transposed view of a fresh tensor: strides (1, 4), storage that
    # holds exp(x * 2 + 1) row by row.
    y = torch.exp(x * 2 + 1).t()
    window = torch.as_strided(y, (2, 5), (5, 1), 1)
    written = torch.as_strided_scatter(y, src, (2, 3), (1, 4), 2)
    return window * 3, written - 1


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(2, 3)


def test_as_strided_and_its_scatter_read_storage_order_on_max(max_calls):
    x, src = _inputs()
    compiled = torch.compile(
        strided_reads, backend=max_backend, options={"strict": True}
    )
    for got, want in zip(compiled(x, src), strided_reads(x, src), strict=True):
        torch.testing.assert_close(got, want)
    assert max_calls.of("inference") == 1


def test_as_strided_in_pytorch_after_a_max_block_sees_eager_layout(
    max_calls, monkeypatch
):
    x, src = _inputs()
    options = {
        "torch_executed_ops": ["aten.as_strided", "aten.as_strided_scatter"],
        "min_block_size": 1,
    }
    compiled = torch.compile(strided_reads, backend=max_backend, options=options)
    with pytest.warns(FallbackWarning, match="aten.as_strided.default"):
        got = compiled(x, src)
    for g, want in zip(got, strided_reads(x, src), strict=True):
        torch.testing.assert_close(g, want)
    assert max_calls.of("inference") >= 1

    # Without the re-layout the same split graph reads MAX's contiguous copy
    # in the wrong order: this test would catch a lost layout. (Inference
    # blocks also return eager's layouts themselves, so that is switched off
    # here too.)
    torch._dynamo.reset()
    monkeypatch.setattr(fallback_module, "keep_eager_layouts", lambda gm: 0)
    monkeypatch.setattr(graph_builds.GraphBuilds, "_layouts", lambda self, gm: None)
    compiled = torch.compile(strided_reads, backend=max_backend, options=options)
    with pytest.warns(FallbackWarning):
        wrong, _ = compiled(x, src)
    assert not torch.allclose(wrong, strided_reads(x, src)[0])
