"""Flex attention (lower/builder/flex_attention.py): score and mask functions
with captured tensors, a causal block mask, GQA and the logsumexp against
eager, in one MAX graph in strict mode; transformers' llama with
attn_implementation="flex_attention"."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from torch_max_backend import explain, max_backend

BATCH, HEADS, KV_HEADS, LENGTH, DIM = 2, 4, 2, 16, 8

torch.manual_seed(0)
RELATIVE = torch.randn(LENGTH)  # a learned bias by distance, captured
DOCUMENTS = torch.tensor([0] * 5 + [1] * 7 + [2] * 4)  # packed sequences


def _relative_bias(score, b, h, q, kv):
    return score + RELATIVE[(q - kv).abs()] * (h + 1)


def _causal(b, h, q, kv):
    return q >= kv


def _same_document(b, h, q, kv):
    return (DOCUMENTS[q] == DOCUMENTS[kv]) & (q >= kv)


CAUSAL = create_block_mask(_causal, None, None, LENGTH, LENGTH, device="cpu")
DOCUMENT = create_block_mask(_same_document, None, None, LENGTH, LENGTH, device="cpu")


def _attend(q, k, v, k_grouped, v_grouped):
    biased = flex_attention(q, k, v, score_mod=_relative_bias, block_mask=CAUSAL)
    grouped, lse = flex_attention(
        q, k_grouped, v_grouped, block_mask=DOCUMENT, enable_gqa=True, return_lse=True
    )
    return biased, grouped, lse


def _eager(*args):
    with warnings.catch_warnings():  # eager's "called without torch.compile"
        warnings.simplefilter("ignore", UserWarning)
        return _attend(*args)


def test_score_and_mask_functions_gqa_and_logsumexp_match_eager(max_calls):
    compiled = torch.compile(_attend, backend=max_backend, options={"strict": True})
    q, k, v = (torch.randn(BATCH, HEADS, LENGTH, DIM) for _ in range(3))
    grouped = [torch.randn(BATCH, KV_HEADS, LENGTH, DIM) for _ in range(2)]
    for got, want in zip(
        compiled(q, k, v, *grouped), _eager(q, k, v, *grouped), strict=True
    ):
        torch.testing.assert_close(got, want)
    assert max_calls.count == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        report = explain(_attend, q, k, v, *grouped)
    (graph,) = report.graphs
    (flex,) = [op for op in graph.ops if op.op == "flex_attention"]
    assert flex.on_max and flex.count == 2
    assert report.unsupported == {}


def test_llama_with_flex_attention_runs_forward_on_max(max_calls):
    pytest.importorskip("transformers")
    from benchmarks.hf_architectures import build, by_name

    model, inputs = build(by_name("llama"))
    model.eval().set_attn_implementation("flex_attention")
    assert model.config._attn_implementation == "flex_attention"
    ids = inputs["input_ids"]
    with torch.no_grad():
        want = model(ids).logits
        compiled = torch.compile(model, backend=max_backend, options={"strict": True})
        got = compiled(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert max_calls.count >= 1
