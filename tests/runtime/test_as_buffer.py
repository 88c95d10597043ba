"""``as_buffer``: a torch tensor handed to MAX sharing its memory, on the CPU
without torch's ``Tensor.__dlpack__`` (whose checks, in Python, cost about 5
us a tensor: most of a small graph's call)."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend.runtime.compiled_graph import as_buffer


def _back(buffer) -> torch.Tensor:
    return torch.from_dlpack(buffer)


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(3, 5),
        torch.randn(3, 5).bfloat16(),
        torch.arange(7, dtype=torch.int64),
        torch.tensor([True, False, True]),
        torch.tensor(2.5),  # 0-d
        torch.empty(0, 4),
        torch.randn(4, 6)[:, 1:4],  # strided: handed as a contiguous copy
        torch.randn(3, requires_grad=True),
        torch.nn.Parameter(torch.randn(2, 2)),
    ],
    ids=["f32", "bf16", "i64", "bool", "0d", "empty", "strided", "grad", "param"],
)
def test_cpu_tensors_cross_without_torchs_dlpack_method(tensor, monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("Tensor.__dlpack__ was called")

    monkeypatch.setattr(torch.Tensor, "__dlpack__", refused)
    monkeypatch.setattr(torch.Tensor, "__dlpack_device__", refused)
    buffer = as_buffer(tensor)
    monkeypatch.undo()
    back = _back(buffer)
    assert back.dtype == tensor.dtype and back.shape == tensor.shape
    torch.testing.assert_close(back, tensor.detach(), rtol=0, atol=0)


def test_the_buffer_shares_a_contiguous_tensors_memory():
    tensor = torch.zeros(4)
    back = _back(as_buffer(tensor))
    assert back.data_ptr() == tensor.data_ptr()
    tensor.add_(3)  # an in-place update (an optimizer step) is seen
    assert back.tolist() == [3.0] * 4


def test_the_buffer_keeps_its_tensor_alive():
    buffer = as_buffer(torch.full((1024,), 7.0))
    import gc

    gc.collect()
    assert _back(buffer)[-1].item() == 7.0


def test_a_tensor_subclass_still_goes_through_its_own_method(monkeypatch):
    """A subclass may override __dlpack__ or __torch_function__: it keeps
    torch's path, which honours them."""

    class Marked(torch.Tensor):
        pass

    calls = []
    original = torch.Tensor.__dlpack__

    def spy(self, *args, **kwargs):
        calls.append(type(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__dlpack__", spy)
    tensor = torch.randn(3).as_subclass(Marked)
    back = _back(as_buffer(tensor))
    assert calls and set(calls) == {Marked}
    torch.testing.assert_close(back, tensor.as_subclass(torch.Tensor))
