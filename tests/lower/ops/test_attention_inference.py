"""Attention in inference: MAX's softmax, which MAX compiles into its flash
attention kernel, where nothing reads the log-sum-exp; torch's results for
fully masked rows, NaNs and infinities."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend import max_backend
from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for

from ..repeat_kv import repeat_kv

aten = torch.ops.aten
_FLASH = aten._scaled_dot_product_flash_attention_for_cpu.default


def _output_only(q, k, v, mask):
    return _FLASH(q, k, v, attn_mask=mask)[0]


def _both_outputs(q, k, v, mask):
    return _FLASH(q, k, v, attn_mask=mask)


def _causal(q, k, v, mask):
    return _FLASH(q, k, v, is_causal=True)[0]


def _grouped(q, k, v, mask):
    return _FLASH(q.repeat(1, 2, 1, 1), k, v, attn_mask=mask)[0]


def _value_repeated_key_cast(q, k, v, mask):
    # Under autocast a llama's rotated keys are cast after repeat_kv and its
    # values are not: the walk hands the lowering the values grouped and the
    # keys repeated.
    half = k.shape[1] // 2
    keys = repeat_kv(k[:, :half].double(), 2).to(q.dtype)
    return _FLASH(q, keys, repeat_kv(v[:, :half], 2), attn_mask=mask)[0]


@pytest.mark.parametrize(
    ("fn", "device", "expected"),
    [
        (_output_only, "cpu", "softmax"),
        (_both_outputs, "cpu", "log_sum_exp"),
        (_causal, "cpu", "softmax"),
        # MAX's flash kernel gave a left-padded llama's rows NaN: grouped
        # heads take exps over their sums, without the log-sum-exp.
        (_grouped, "cpu", "exp_over_sum"),
        (_value_repeated_key_cast, "cpu", "exp_over_sum"),
        # What MAX compiles the pattern into was checked on the CPU only.
        (_output_only, "meta", "log_sum_exp"),
    ],
    ids=[
        "lse-unread",
        "lse-read",
        "causal",
        "grouped-query",
        "values-repeated",
        "not-cpu",
    ],
)
def test_softmax_where_the_log_sum_exp_is_unread(fn, device, expected):
    register_families()
    q = torch.zeros(1, 2, 3, 8, device=device)
    gm = make_fx(fn, tracing_mode="fake")(q, q, q, torch.zeros(3, 3, device=device))
    (node,) = [n for n in gm.graph.nodes if n.target == _FLASH]
    assert strategy_for(MAPPING_TORCH_ATEN_TO_MAX[node.target], node) == expected


def _attentions(q, k, v, kv_k, kv_v, bool_mask, float_mask, inf_q):
    return (
        F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask),
        F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask, scale=0.3),
        F.scaled_dot_product_attention(inf_q, k, v, is_causal=True),
        # One query against a long cache, 12 query heads over 4 key/value
        # heads (exps over their sums).
        F.scaled_dot_product_attention(
            q[:, :, -1:].repeat(1, 6, 1, 1), kv_k, kv_v, enable_gqa=True
        ),
        # Grouped heads under a left-padding mask, one row without a key.
        F.scaled_dot_product_attention(
            q.repeat(1, 2, 1, 1),
            kv_k[:, :2, :5],
            kv_v[:, :2, :5],
            attn_mask=bool_mask,
            enable_gqa=True,
        ),
    )


def test_inference_attention_matches_eager_in_one_softmax_kernel_each(
    max_calls,
    graph_texts,
):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
    kv_k, kv_v = torch.randn(2, 4, 40, 8), torch.randn(2, 4, 40, 8)
    bool_mask = torch.rand(2, 1, 5, 5) > 0.4
    bool_mask[0, :, 2, :] = False  # a query that sees no key: zeros
    float_mask = torch.randn(2, 1, 5, 5)
    float_mask[0, :, 4, :] = float("-inf")
    inf_q = torch.randn(2, 2, 5, 8)
    # A NaN value and an infinite query give NaN, as eager's. (NaN scores
    # differ: torch's kernel gives zeros for a row whose only score is NaN,
    # as torch's other attention kernels do not; a NaN score the mask hides
    # gives NaN here, where torch hides it, as MAX's flash kernel adds the
    # mask to the scores.)
    v[1, 1, 2, 3] = float("nan")

    inf_q[1, 0, 2, 5] = float("inf")
    inputs = (q, k, v, kv_k, kv_v, bool_mask, float_mask, inf_q)
    compiled = torch.compile(
        _attentions, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    with torch.no_grad():
        got, want = compiled(*inputs), _attentions(*inputs)
    assert want[0][0, :, 2].eq(0).all() and want[2][1, 1, :, 3].isnan().all()
    for i, (g, e) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(
            g, e, rtol=1e-4, atol=1e-5, equal_nan=True, msg=lambda m, i=i: f"{i}: {m}"
        )
    assert want[4][0, :, 2].eq(0).all()
    assert max_calls.of("inference") == 1
    (text,) = graph_texts()
    # Three of MAX's softmax; the grouped two without a log-sum-exp's log.
    assert text.count("softmax") == 3 and "mo.log" not in text


def test_values_repeated_per_query_head_with_keys_cast_match_eager(max_calls):
    # A llama under CPU autocast: the lowering gets 2 value heads for 4 query
    # heads and 4 key heads; it built a product of 4 heads by 2 and failed.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    mask = torch.randn(2, 1, 5, 5)
    compiled = torch.compile(
        _value_repeated_key_cast,
        backend=max_backend,
        fullgraph=True,
        options={"strict": True},
    )
    with torch.no_grad():
        got = compiled(q, k, v, mask)
    want = _value_repeated_key_cast(q, k, v, mask)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert max_calls.of("inference") == 1
