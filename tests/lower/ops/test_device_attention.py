"""torch's GPU attention kernels (flash, memory-efficient, cuDNN) and their
backwards, rewritten to the attention op we lower: checked on the CPU by
calling the ops directly (their meta functions trace anywhere), against
attention computed by hand in float64."""

from __future__ import annotations

import math

import pytest
import torch

from torch_max_backend import max_backend
from torch_max_backend.lower.ops import device_attention

aten = torch.ops.aten


def _reference(q, k, v, bias=None, is_causal=False, scale=None):
    """Output and log-sum-exp, in float64, keys grouped per query head."""
    q, k, v = q.double(), k.double(), v.double()
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    s = q @ k.transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if bias is not None:
        s = s + bias.double()
    if is_causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), -math.inf)
    lse = s.logsumexp(-1)
    return (s - lse[..., None]).exp() @ v, lse


def _inputs(heads=4, kv_heads=2, rows=5, keys=7, grad=False):
    torch.manual_seed(0)
    q = torch.randn(2, heads, rows, 8, requires_grad=grad)
    k = torch.randn(2, kv_heads, keys, 8, requires_grad=grad)
    v = torch.randn(2, kv_heads, keys, 8, requires_grad=grad)
    return q, k, v


def _compiled(fn):
    return torch.compile(
        fn, backend=max_backend, fullgraph=True, options={"strict": True}
    )


def test_efficient_attention_forward_matches_with_its_padded_log_sum_exp(max_calls):
    q, k, v = _inputs(heads=2, kv_heads=2, rows=40)
    k, v = k.repeat(1, 1, 6, 1), v.repeat(1, 1, 6, 1)  # 42 keys
    bias = torch.randn(2, 1, 40, 42)

    def run(q, k, v, bias):
        out, lse, seed, _ = aten._scaled_dot_product_efficient_attention(
            q, k, v, bias, True, scale=0.3
        )
        return out, lse, seed

    out, lse, seed = _compiled(run)(q, k, v, bias)
    want_out, want_lse = _reference(q, k, v, bias, scale=0.3)
    torch.testing.assert_close(out, want_out.float(), rtol=1e-4, atol=1e-5)
    assert lse.shape == (2, 2, 64)  # 40 rows padded to a multiple of 32
    torch.testing.assert_close(lse[..., :40], want_lse.float(), rtol=1e-4, atol=1e-5)
    assert seed.dtype == torch.int64 and seed.device.type == "cpu"
    assert max_calls.of("inference") == 1


@pytest.mark.parametrize("kind", ["flash", "cudnn"])
def test_flash_and_cudnn_attention_forward_match(max_calls, kind):
    q, k, v = _inputs()  # 4 query heads over 2 key/value heads

    def run(q, k, v):
        if kind == "flash":
            result = aten._scaled_dot_product_flash_attention(q, k, v, is_causal=True)
        else:
            result = aten._scaled_dot_product_cudnn_attention(
                q, k, v, None, True, is_causal=True
            )
        return result[0], result[1], result[4], result[5]

    out, lse, max_q, max_k = _compiled(run)(q, k, v)
    want_out, want_lse = _reference(q, k, v, is_causal=True)
    torch.testing.assert_close(out, want_out.float(), rtol=1e-4, atol=1e-5)
    if kind == "cudnn":
        assert lse.shape[-1] == 1
        lse = lse.squeeze(-1)
    torch.testing.assert_close(lse, want_lse.float(), rtol=1e-4, atol=1e-5)
    assert (max_q, max_k) == (5, 7)
    assert max_calls.of("inference") == 1


@pytest.mark.parametrize("kind", ["efficient", "flash", "cudnn"])
def test_attention_backwards_match_autograd(max_calls, kind):
    q, k, v = _inputs(grad=True)
    bias = torch.randn(2, 1, 5, 7)
    causal = kind == "flash"  # flash takes no bias
    want_out, want_lse = _reference(q, k, v, None if causal else bias, causal)
    grad_out = torch.randn_like(want_out)
    want = torch.autograd.grad(want_out, (q, k, v), grad_out)
    out, lse = want_out.float().detach(), want_lse.float().detach()
    zero = torch.zeros((), dtype=torch.int64)
    unused = torch.zeros(0, dtype=torch.int32)  # sequence bookkeeping, unread
    q, k, v = q.detach(), k.detach(), v.detach()

    def run(grad_out, q, k, v, out, lse):
        if kind == "efficient":
            padded = torch.nn.functional.pad(lse, (0, 27))  # 5 rows padded to 32
            grads = aten._scaled_dot_product_efficient_attention_backward(
                grad_out, q, k, v, bias, out, padded, zero, zero, 0.0,
                [True, True, True, False],
            )  # fmt: skip
            assert grads[3] is None
            return grads[:3]
        if kind == "flash":
            return aten._scaled_dot_product_flash_attention_backward(
                grad_out, q, k, v, out, lse, unused, unused, 5, 7, 0.0, True, zero,
                zero,
            )  # fmt: skip
        return aten._scaled_dot_product_cudnn_attention_backward(
            grad_out, q, k, v, out, lse.unsqueeze(-1), zero, zero, bias, unused,
            unused, 5, 7, 0.0, False,
        )  # fmt: skip

    got = _compiled(run)(grad_out.float(), q, k, v, out, lse)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w.float(), rtol=1e-4, atol=1e-4)
    assert max_calls.of("inference") == 1


def test_attention_the_lowering_refuses_is_left_to_pytorch():
    q, k, v = _inputs()
    assert device_attention.efficient_attention(q, k, v, None, False, 0.5) is (
        NotImplemented
    )
    three = torch.randn(2, 3, 7, 8)  # 4 query heads do not split over 3
    assert device_attention.flash_attention(q, three, three) is NotImplemented
