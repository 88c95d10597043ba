"""A decode step's attention (one query row a head) as one Mojo kernel
(lower/one_query_attention.py): where it is taken, and its results
against eager PyTorch: masks of every kind, grouped heads, rows without a
key, chunks of keys and heads of odd widths, a batch known at run time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import max_backend
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for

aten = torch.ops.aten
_FLASH = aten._scaled_dot_product_flash_attention_for_cpu.default
_KERNEL = "torch_max_backend_one_query_attention"


def _output(q, k, v):
    return _FLASH(q, k, v)[0]


@pytest.mark.parametrize(
    ("fn", "rows", "dim", "dtype", "device", "expected"),
    [
        (_output, 1, 64, torch.float32, "cpu", "one_query"),
        (_output, 2, 64, torch.float32, "cpu", "softmax"),
        (lambda q, k, v: _FLASH(q, k, v, is_causal=True)[0], 1, 64, torch.float32, "cpu", "softmax"),
        (_output, 1, 64, torch.float64, "cpu", "softmax"),
        (_output, 1, 320, torch.float32, "cpu", "softmax"),
        (lambda q, k, v: _FLASH(q, k, v), 1, 64, torch.float32, "cpu", "log_sum_exp"),
        (_output, 1, 64, torch.float32, "meta", "log_sum_exp"),
    ],
    ids=["decode", "two-rows", "causal", "float64", "wide-heads", "lse-read", "not-cpu"],
)  # fmt: skip
def test_where_one_query_row_takes_the_kernel(fn, rows, dim, dtype, device, expected):
    register_families()
    q = torch.zeros(2, 4, rows, dim, dtype=dtype, device=device)
    kv = torch.zeros(2, 4, 9, dim, dtype=dtype, device=device)
    gm = make_fx(fn, tracing_mode="fake")(q, kv, kv)
    (node,) = [n for n in gm.graph.nodes if n.target == _FLASH]
    assert strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node) == expected


def _decode_attentions(q, k, v, gq, gk, gv, bool_mask, float_mask, head_mask):
    return (
        # 3 heads, 37 keys (a tail of a vector), no mask.
        F.scaled_dot_product_attention(q, k, v),
        # 8 query heads over 2 key/value heads, 200 keys (two chunks), heads
        # of 80 values; a left-padding mask, batch entry 1 without a key.
        F.scaled_dot_product_attention(
            gq, gk, gv, attn_mask=bool_mask, enable_gqa=True
        ),
        # A float mask of -inf and the lowest float, shared by the batch;
        # a scale of its own.
        F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask, scale=0.3),
        # A mask per batch entry and head.
        F.scaled_dot_product_attention(q, k, v, attn_mask=head_mask),
    )


def _inputs(batch: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(batch)
    q, k = torch.randn(batch, 3, 1, 64), torch.randn(batch, 3, 37, 64)
    v = torch.randn(batch, 3, 37, 64)
    gq = torch.randn(batch, 8, 1, 80)
    gk, gv = torch.randn(batch, 2, 200, 80), torch.randn(batch, 2, 200, 80)
    # The largest score in the second chunk of keys: the running sums rescale.
    gk[:, :, 170] = gq[:, :2, 0] * 4
    bool_mask = torch.rand(batch, 1, 1, 200) > 0.3
    bool_mask[1] = False
    float_mask = torch.zeros(1, 1, 1, 37)
    float_mask[..., :5] = float("-inf")
    float_mask[..., 30:] = torch.finfo(torch.float32).min
    head_mask = torch.randn(batch, 3, 1, 37)
    return q, k, v, gq, gk, gv, bool_mask, float_mask, head_mask


def test_decode_attention_matches_eager_in_one_kernel_each(max_calls, graph_texts):
    compiled = torch.compile(_decode_attentions, backend=max_backend, fullgraph=True)
    for batch in (3, 5):
        inputs = _inputs(batch)
        for t in inputs:
            if t.shape[0] == batch:
                torch._dynamo.mark_dynamic(t, 0)
        got = compiled(*inputs)
        for g, e in zip(got, _decode_attentions(*inputs), strict=True):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
        assert torch.count_nonzero(got[1][1]) == 0  # no key: zeros, as eager
    assert max_calls.count == 2
    (text,) = graph_texts()  # one graph, its batch symbolic
    assert text.count(_KERNEL) == 4
