"""Random ops and mixed precision inside compiled training steps.

Dropout runs on MAX's random generator, so its masks differ from eager's;
the checks are statistical (kept fraction, scaling, gradient through the
mask) plus reproducibility under ``torch.manual_seed``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from vendor_marks import needs_vendor_bfloat16

from torch_max_backend import max_backend

from .helpers import Run, assert_same_training, train_both

P = 0.3
N = 20_000


def _dropout_step(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().requires_grad_(True)
    y = F.dropout(x, P, training=True)
    (y * 2).sum().backward()
    return y.detach(), x.grad


def test_dropout_statistics_gradient_and_seeding(max_calls):
    step = torch.compile(_dropout_step, backend=max_backend)
    x = torch.rand(N) + 0.5  # no zeros: a zero output means dropped
    torch.manual_seed(7)
    y, grad = step(x)
    kept = y != 0
    # Kept fraction within 5 standard deviations of 1 - p.
    sigma = math.sqrt(P * (1 - P) / N)
    assert abs(kept.float().mean().item() - (1 - P)) < 5 * sigma
    # Kept values are scaled by 1 / (1 - p); the gradient flows through the
    # same mask with the same scale.
    torch.testing.assert_close(y[kept], x[kept] / (1 - P))
    torch.testing.assert_close(grad, kept.float() * 2 / (1 - P))
    # The same seed gives the same mask; the next call draws a new one.
    torch.manual_seed(7)
    again, _ = step(x)
    torch.testing.assert_close(again, y, rtol=0, atol=0)
    other, _ = step(x)
    assert not torch.equal(other != 0, kept)
    assert max_calls.of("forward") == 3
    assert max_calls.of("backward") == 3


def _autocast_runs() -> tuple[Run, Run]:
    """A small MLP trained three steps under bfloat16 autocast, compiled and
    eagerly."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)
    )
    g = torch.Generator().manual_seed(4)
    batches = [
        (torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g))
        for _ in range(3)
    ]

    def loss_of(m, batch):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m(batch[0])
        assert out.dtype == torch.bfloat16
        return F.mse_loss(out.float(), batch[1])

    return train_both(model, lambda p: torch.optim.SGD(p, lr=0.1), loss_of, batches)


def test_bfloat16_autocast_training_step(max_calls):
    got, eager = _autocast_runs()
    # bfloat16 keeps 8 bits of mantissa: MAX and PyTorch round matmul
    # accumulations differently, so compare at bfloat16's resolution.
    assert_same_training(got, eager, rtol=2e-2, atol=2e-2)
    assert max_calls.of("forward") == 3
    assert max_calls.of("backward") == 3


@needs_vendor_bfloat16
def test_bfloat16_autocast_training_step_on_the_vendor_products(
    max_calls, graph_texts, monkeypatch
):
    """Forward and backward products (a weight gradient reads dY transposed)
    through MKL's bfloat16 product match eager's training."""
    monkeypatch.setenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY", "vendor")
    got, eager = _autocast_runs()
    assert_same_training(got, eager, rtol=2e-2, atol=2e-2)
    assert max_calls.of("backward") == 3
    forward, backward = graph_texts()[:2]
    assert forward.count("torch_max_backend_vendor_matmul") == 2
    # dX of the second Linear, dW of both (the first Linear's dX is unused).
    assert backward.count("torch_max_backend_vendor_matmul") == 3
    assert "mo.matmul" not in forward + backward
