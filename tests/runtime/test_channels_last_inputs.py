"""Channels-last inputs handed to MAX as their dense N, *spatial, C view
(lower/builder/channels_last_inputs.py): no copy where the caller's tensor
is laid out as traced, a copy with the same values where it is not."""

from __future__ import annotations

import torch

from torch_max_backend.lower.layout import takes_channels_last
from torch_max_backend.plan import GraphPlan, InputKind, InputSource
from torch_max_backend.runtime.compiled_graph import CompiledGraph


def test_which_inputs_are_taken_channels_last():
    last = torch.randn(2, 3, 5, 4).contiguous(memory_format=torch.channels_last)
    volume = torch.randn(2, 3, 2, 5, 4).contiguous(memory_format=torch.channels_last_3d)
    assert takes_channels_last(last)
    assert takes_channels_last(volume)
    assert not takes_channels_last(last.to("meta"))  # not on the CPU
    assert not takes_channels_last(torch.randn(2, 3, 5, 4))  # contiguous
    # Both layouts at once (1x1 maps, one channel): already dense as it is.
    assert not takes_channels_last(
        torch.randn(2, 3, 1, 1).contiguous(memory_format=torch.channels_last)
    )
    assert not takes_channels_last(
        torch.randn(2, 1, 5, 4).contiguous(memory_format=torch.channels_last)
    )
    assert not takes_channels_last(torch.randn(2, 3, 5, 4)[:, :, ::2])
    assert not takes_channels_last(torch.randn(5, 4, 3).permute(2, 0, 1))


def _flat_last(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.permute(0, 2, 3, 1).reshape(tensor.shape[0], -1)


def test_a_dense_view_is_handed_without_a_copy_and_kept():
    plan = GraphPlan("cpu", (InputSource(InputKind.CHANNELS_LAST, 0),), ())
    graph = CompiledGraph("channels_last_view", None, plan)
    weight = torch.nn.Parameter(
        torch.randn(4, 3, 2, 2).contiguous(memory_format=torch.channels_last)
    )
    (buffer,) = graph._buffers([weight])
    back = torch.from_dlpack(buffer)
    assert back.data_ptr() == weight.data_ptr(), "copied"
    torch.testing.assert_close(back, _flat_last(weight.detach()), rtol=0, atol=0)
    (again,) = graph._buffers([weight])
    assert again is buffer  # a parameter's buffer is reused


def test_an_input_laid_out_otherwise_is_copied_with_its_values():
    plan = GraphPlan("cpu", (InputSource(InputKind.CHANNELS_LAST, 0),), ())
    graph = CompiledGraph("channels_last_copy", None, plan)
    for tensor in (
        torch.randn(2, 3, 4, 5),  # contiguous
        torch.randn(2, 3, 8, 5)[:, :, ::2],  # not dense at all
        torch.randn(2, 4, 5, 3).permute(0, 3, 1, 2),  # channels-last: a view
    ):
        (buffer,) = graph._buffers([tensor])
        torch.testing.assert_close(
            torch.from_dlpack(buffer), _flat_last(tensor), rtol=0, atol=0
        )
        # A copy is never kept for the next call, which may change the tensor.
        tensor.add_(1)
        (buffer,) = graph._buffers([tensor])
        torch.testing.assert_close(
            torch.from_dlpack(buffer), _flat_last(tensor), rtol=0, atol=0
        )
