"""Pooling in 1, 2 and 3 spatial dims: one inference graph, one training pair.

Every forward variant shares one compiled graph; the training check runs max,
average and adaptive pooling (2-d and 3-d) through forward and backward and
compares the gradients with eager autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend

from .helpers import check_against_eager


def forward_variants(
    x: torch.Tensor, nan: torch.Tensor, x3: torch.Tensor, seq: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    values, indices = F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)
    dilated, dilated_idx = F.max_pool2d(
        x, (2, 3), stride=(1, 2), padding=(1, 1), dilation=(2, 1), return_indices=True
    )
    ceil, ceil_idx = F.max_pool2d(x, 2, stride=2, ceil_mode=True, return_indices=True)
    nan_values, nan_idx = F.max_pool2d(nan, 2, return_indices=True)
    floor_nan = F.max_pool2d(nan, 2)  # MAX's kernel: values only
    values3, indices3 = F.max_pool3d(
        x3, (2, 2, 3), stride=(1, 2, 2), padding=(1, 0, 1), return_indices=True
    )
    ceil3, ceil3_idx = F.max_pool3d(x3, 2, ceil_mode=True, return_indices=True)
    seq_values, seq_idx = F.max_pool1d(seq, 3, stride=2, return_indices=True)
    return (
        values,
        indices,
        dilated,
        dilated_idx,
        ceil,
        ceil_idx,
        torch.where(nan_values.isnan(), -1.0, nan_values),
        nan_idx,
        floor_nan.isnan(),
        torch.where(floor_nan.isnan(), -1.0, floor_nan),
        values3,
        indices3,
        ceil3,
        ceil3_idx,
        seq_values,
        seq_idx,
        F.max_pool2d(x[0], 2),  # unbatched
        F.max_pool2d(x, (2, 3), stride=(1, 2), padding=(1, 1), dilation=(2, 1)),
        # average pooling: MAX's kernel, then the exact tables
        F.avg_pool2d(x, 3, stride=2, padding=1),
        F.avg_pool2d(x, 2, count_include_pad=False),
        # MAX's kernel gets these divisors wrong: built from tables instead.
        F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
        F.avg_pool2d(x, 2, stride=2, padding=1, count_include_pad=False),
        F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
        F.avg_pool2d(
            x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False
        ),
        F.avg_pool2d(x, 2, divisor_override=3),
        F.avg_pool1d(seq, 3, stride=2, padding=1, ceil_mode=True),
        F.avg_pool3d(x3, (2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0)),
        F.avg_pool3d(x3, 3, stride=2, padding=1, count_include_pad=False),
        F.avg_pool3d(x3, 2, ceil_mode=True, divisor_override=5),
        F.adaptive_avg_pool2d(x, (3, 4)),
        F.adaptive_avg_pool2d(x, 1),
        F.adaptive_avg_pool2d(x[0], 5),
        F.adaptive_avg_pool1d(seq, 4),
        F.adaptive_avg_pool3d(x3, (2, 3, 4)),
    )


def test_forward_variants(max_calls):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 9)
    # Ties and NaNs decide indices: torch keeps the first maximum of a window
    # but the last NaN.
    x[0, 0, :2, :2] = 1.5
    nan = torch.randn(1, 2, 4, 6)
    nan[0, 0, 0, 0] = nan[0, 0, 1, 1] = float("nan")
    nan[0, 1, 2:, 2:4] = float("-inf")
    x3 = torch.randn(2, 2, 5, 6, 7)
    seq = torch.randn(2, 3, 11)
    with torch.no_grad():
        check_against_eager(forward_variants, x, nan, x3, seq, rtol=1e-5, atol=1e-6)
    assert max_calls.count == 1


class Pools(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale2 = torch.nn.Parameter(torch.linspace(0.5, 1.5, 2).view(1, 2, 1, 1))
        self.shift = torch.nn.Parameter(torch.randn(2, 9, 10))
        self.scale3 = torch.nn.Parameter(torch.linspace(0.5, 1.5, 3).view(3, 1, 1, 1))

    def forward(self, x: torch.Tensor, x3: torch.Tensor) -> torch.Tensor:
        h = x * self.scale2 + self.shift
        v = x3 * self.scale3
        pooled = (
            F.max_pool2d(h, 3, stride=2, padding=1),
            F.max_pool2d(h, 2, stride=1),  # overlapping windows share maxima
            F.avg_pool2d(h, 3, stride=2, padding=1, count_include_pad=False),
            F.avg_pool2d(h, 2, ceil_mode=True, divisor_override=3),
            F.adaptive_avg_pool2d(h, (3, 4)),
            F.adaptive_avg_pool2d(h, 2),
            F.max_pool3d(v, 2, stride=1, padding=1),
            F.avg_pool3d(v, (2, 3, 2), stride=2, padding=1),
            F.adaptive_avg_pool3d(v, (2, 3, 4)),
        )
        # Distinct weights per output, so that no gradient hides another.
        return sum((i - 4) * (p * p.detach().sin()).sum() for i, p in enumerate(pooled))


def test_training_gradients_match_eager(max_calls):
    torch.manual_seed(0)
    eager, compiled_model = Pools(), Pools()
    compiled_model.load_state_dict(eager.state_dict())
    x_eager = torch.randn(2, 2, 9, 10, requires_grad=True)
    x3_eager = torch.randn(1, 3, 4, 5, 6, requires_grad=True)
    x_max = x_eager.detach().clone().requires_grad_(True)
    x3_max = x3_eager.detach().clone().requires_grad_(True)

    expected = eager(x_eager, x3_eager)
    expected.backward()
    compiled = torch.compile(compiled_model, backend=max_backend, fullgraph=True)
    got = compiled(x_max, x3_max)
    got.backward()

    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x_max.grad, x_eager.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x3_max.grad, x3_eager.grad, rtol=1e-4, atol=1e-5)
    for (name, p_max), p_eager in zip(
        compiled_model.named_parameters(), eager.parameters(), strict=True
    ):
        torch.testing.assert_close(
            p_max.grad, p_eager.grad, rtol=1e-4, atol=1e-5, msg=name
        )
    assert max_calls.of("forward") == 1
    assert max_calls.of("backward") == 1
