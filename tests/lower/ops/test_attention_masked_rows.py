"""Attention rows whose keys are all masked, as left padding makes them: torch
gives them a zero output and zero gradients; a NaN there would spread to every
row through the next layer's keys and values."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend


def _two_masks(q, k, v, float_mask, bool_mask) -> torch.Tensor:
    # One graph for both kinds of mask: one forward and one backward compile.
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=float_mask
    ) + F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask)


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 4, 8, requires_grad=True) for _ in range(3))
    float_mask = torch.zeros(2, 1, 4, 4)
    float_mask[0, :, :2, :] = float("-inf")  # the first two queries see no key
    bool_mask = torch.rand(2, 1, 4, 4) > 0.3
    bool_mask[1, :, 3, :] = False
    return [q, k, v, float_mask, bool_mask]


def test_a_fully_masked_row_gives_zeros_and_zero_gradients_as_in_eager(max_calls):
    inputs = _inputs()
    leaves = inputs[:3]
    compiled = torch.compile(
        _two_masks, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    got = compiled(*inputs)
    want = _two_masks(*inputs)
    assert not want.isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    grad = torch.randn_like(want)
    got_grads = torch.autograd.grad(got, leaves, grad)
    want_grads = torch.autograd.grad(want, leaves, grad)
    for name, g, w in zip("qkv", got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=f"grad of {name}")
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
