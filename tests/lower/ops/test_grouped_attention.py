"""Grouped- and multi-query attention on MAX (fewer key/value heads than query
heads), forward and backward, against eager: causal, float and boolean masks,
one query against a long cache; an uneven head ratio fails as in eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import max_backend


def _attention(q, k, v, mask, causal: bool) -> torch.Tensor:
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True
    )


def _inputs(heads: int, kv_heads: int, length: int, cache: int, grad: bool):
    torch.manual_seed(0)
    q = torch.randn(2, heads, length, 16, requires_grad=grad)
    k = torch.randn(2, kv_heads, cache, 16, requires_grad=grad)
    v = torch.randn(2, kv_heads, cache, 16, requires_grad=grad)
    return q, k, v


def _float_mask(length: int, cache: int) -> torch.Tensor:
    mask = torch.zeros(2, 1, length, cache)
    mask[0, :, :, :3] = float("-inf")  # padding on the left of the first row
    return mask


def _bool_mask(length: int, cache: int) -> torch.Tensor:
    return torch.rand(1, 1, length, cache) > 0.3


# (query heads, key/value heads, mask, causal): grouped and multi-query.
CASES = [(12, 4, None, True), (8, 1, "float", False), (4, 2, "bool", False)]


def _three_attentions(*tensors: torch.Tensor) -> list[torch.Tensor]:
    # One graph for every case: one forward and one backward compile in all.
    outs = []
    for i, (_, _, _, causal) in enumerate(CASES):
        q, k, v, mask = tensors[4 * i : 4 * i + 4]
        outs.append(_attention(q, k, v, mask, causal))
    return outs


def test_grouped_attention_trains_like_eager(max_calls):
    tensors: list = []
    masks = {None: None, "float": _float_mask(8, 8), "bool": _bool_mask(8, 8)}
    for heads, kv_heads, mask, _ in CASES:
        tensors += [*_inputs(heads, kv_heads, 8, 8, grad=True), masks[mask]]
    leaves = [t for t in tensors if t is not None and t.requires_grad]
    compiled = torch.compile(
        _three_attentions, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    outs = compiled(*tensors)
    grads = [torch.randn_like(o) for o in outs]
    got = torch.autograd.grad(outs, leaves, grads)
    want_outs = _three_attentions(*tensors)
    want = torch.autograd.grad(want_outs, leaves, grads)
    for o, w in zip(outs, want_outs, strict=True):
        torch.testing.assert_close(o, w, rtol=1e-4, atol=1e-5)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        case, which = divmod(i, 3)
        name = f"case {CASES[case]}: grad of {'qkv'[which]}"
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=name)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1


def test_one_query_against_a_long_cache(max_calls):
    q, k, v = _inputs(8, 2, 1, 96, grad=False)
    mask = torch.zeros(2, 1, 1, 96)
    mask[:, :, :, 70:] = float("-inf")  # the cache's unused tail
    compiled = torch.compile(
        _attention, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    got = compiled(q, k, v, mask, False)
    torch.testing.assert_close(
        got, _attention(q, k, v, mask, False), rtol=1e-4, atol=1e-5
    )
    assert max_calls.of("inference") == 1


def test_an_uneven_head_ratio_fails_as_in_eager():
    q, k, v = _inputs(6, 4, 4, 4, grad=False)
    with pytest.raises(RuntimeError) as eager:
        _attention(q, k, v, None, False)
    compiled = torch.compile(_attention, backend=max_backend, fullgraph=True)
    with pytest.raises(Exception) as ours:
        compiled(q, k, v, None, False)
    assert str(eager.value).splitlines()[0] in str(ours.value)
