"""GPU paths: run where MAX sees an accelerator, skip cleanly elsewhere."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import get_accelerators, max_backend

HAS_GPU = len(list(get_accelerators())) >= 2 and torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not HAS_GPU, reason="no MAX-supported GPU here")


def test_cuda_tensors_run_on_the_accelerator(max_calls):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU()).cuda().eval()
    x = torch.randn(4, 8, device="cuda")
    with torch.no_grad():
        got = torch.compile(model, backend=max_backend, fullgraph=True)(x)
        expected = model(x)
    assert got.device == x.device
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert max_calls.count == 1


def test_cuda_training_step(max_calls):
    model = torch.nn.Linear(3, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    @torch.compile(backend=max_backend)
    def step(x, y):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    x, y = torch.randn(4, 3, device="cuda"), torch.randn(4, 2, device="cuda")
    before = model.weight.detach().clone()
    loss = step(x, y)
    assert loss.device.type == "cuda"
    assert not torch.equal(model.weight.detach(), before)
    assert max_calls.of("backward") == 1
