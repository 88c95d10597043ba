"""Attention rows whose keys are all masked, as left padding makes them: torch
gives them a zero output and zero gradients; a NaN there would spread to every
row through the next layer's keys and values."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tiny_models import tiny_llama

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


def test_a_left_padded_batch_through_a_llama_matches_eager(max_calls):
    # transformers hands SDPA fully masked rows for the padded positions.
    torch.manual_seed(0)
    model = tiny_llama()
    ids = torch.randint(0, 256, (2, 6))
    attention_mask = torch.ones(2, 6, dtype=torch.long)
    attention_mask[0, :3] = 0  # the first sequence is three tokens shorter
    compiled = torch.compile(model, backend=max_backend, options={"strict": True})
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=attention_mask).logits
        got = compiled(input_ids=ids, attention_mask=attention_mask).logits
    assert want.isfinite().all()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert max_calls.of("inference") >= 1


def _layers_under_one_mask(q, k, v, mask) -> torch.Tensor:
    first = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return F.scaled_dot_product_attention(first, k * 2, v, attn_mask=mask)


def test_layers_under_one_mask_find_its_keyless_rows_once(graph_texts):
    """The rows a mask leaves without a key are told by the mask alone: built
    once per graph, not once per attention (MAX merges no repeats)."""
    q, k, v, float_mask, _ = _inputs()
    compiled = torch.compile(_layers_under_one_mask, backend=max_backend)
    with torch.no_grad():
        got = compiled(q, k, v, float_mask)
        want = _layers_under_one_mask(q, k, v, float_mask)
    assert not want.isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    (text,) = graph_texts()
    assert text.count("mo.reduce.softmax") == 2
    assert text.count("rmo.mo.reduce.max") == 1
