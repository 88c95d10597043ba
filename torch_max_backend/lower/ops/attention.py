"""Scaled dot-product attention, forward and backward, as fused-friendly MAX ops.

torch picks an attention kernel per device; on CPU the ATen graph holds
``_scaled_dot_product_flash_attention_for_cpu`` and its backward, lowered
here to one matmul/softmax formulation (in float32) that MAX fuses. The backward recomputes the probabilities from the saved
log-sum-exp instead of storing them, as flash attention does.
"""

from __future__ import annotations

import math

import torch
from max.dtype import DType
from max.graph import TensorValue, ops
from max.graph.ops.reduction import max as reduce_max

from ..kit import fake_tensor, schema_args
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import positions, static_size

aten = torch.ops.aten


def _no_dropout_same_heads(node: torch.fx.Node) -> str | None:
    """No dropout, and as many key/value heads as query heads."""
    names = [a.name for a in node.target._schema.arguments]
    values = schema_args(node)
    if values.get("dropout_p", 0.0):
        return "attention with dropout_p > 0"
    q, k = (fake_tensor(values[n]) for n in names[:2])
    if q.shape[:-2] != k.shape[:-2]:
        return "attention with fewer key/value heads than query heads"
    return None


def _scores(
    q: TensorValue,
    k: TensorValue,
    mask: TensorValue | None,
    is_causal: bool,
    scale: float | None,
) -> tuple[TensorValue, TensorValue]:
    """Scaled, masked attention logits (in float32) and the scale used."""
    e = static_size(q.shape[-1])
    factor = scale if scale is not None else 1 / math.sqrt(e or 1)
    qf = ops.cast(q, DType.float32)
    kf = ops.cast(k, DType.float32)
    s = ops.mul(
        ops.matmul(qf, ops.transpose(kf, -1, -2)), as_tensor(factor, DType.float32)
    )
    neg_inf = as_tensor(-math.inf, DType.float32)
    if mask is not None:
        if mask.dtype == DType.bool:
            s = ops.where(mask, s, neg_inf)
        else:
            s = ops.add(s, ops.cast(mask, DType.float32))
    if is_causal:
        rows = positions(q, q.rank - 2)
        cols = positions(k, k.rank - 2)
        keep = ops.greater_equal(ops.unsqueeze(rows, 1), ops.unsqueeze(cols, 0))
        s = ops.where(keep, s, neg_inf)
    return s, as_tensor(factor, DType.float32)


def _logsumexp(s: TensorValue) -> TensorValue:
    peak = reduce_max(s, -1)
    # A fully masked row has peak -inf: shift by 0 there to avoid inf - inf.
    finite = ops.where(ops.is_inf(peak), as_tensor(0.0, DType.float32), peak)
    total = ops.sum(ops.exp(ops.sub(s, finite)), -1)
    return ops.squeeze(ops.add(ops.log(total), finite), -1)


def _forward(
    q: TensorValue,
    k: TensorValue,
    v: TensorValue,
    mask: TensorValue | None,
    is_causal: bool,
    scale: float | None,
) -> tuple[TensorValue, TensorValue]:
    s, _ = _scores(q, k, mask, is_causal, scale)
    lse = _logsumexp(s)
    p = ops.exp(ops.sub(s, ops.unsqueeze(lse, -1)))
    out = ops.matmul(p, ops.cast(v, DType.float32))
    return ops.cast(out, q.dtype), lse


def _backward(
    grad_out: TensorValue,
    q: TensorValue,
    k: TensorValue,
    v: TensorValue,
    out: TensorValue,
    lse: TensorValue,
    mask: TensorValue | None,
    is_causal: bool,
    scale: float | None,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    s, factor = _scores(q, k, mask, is_causal, scale)
    p = ops.exp(ops.sub(s, ops.unsqueeze(ops.cast(lse, DType.float32), -1)))
    do = ops.cast(grad_out, DType.float32)
    grad_v = ops.matmul(ops.transpose(p, -1, -2), do)
    dp = ops.matmul(do, ops.transpose(ops.cast(v, DType.float32), -1, -2))
    # d softmax: P * (dP - rowsum(dO * O)).
    delta = ops.sum(ops.mul(do, ops.cast(out, DType.float32)), -1)
    ds = ops.mul(ops.mul(p, ops.sub(dp, delta)), factor)
    grad_q = ops.matmul(ds, ops.cast(k, DType.float32))
    grad_k = ops.matmul(ops.transpose(ds, -1, -2), ops.cast(q, DType.float32))
    return (
        ops.cast(grad_q, q.dtype),
        ops.cast(grad_k, k.dtype),
        ops.cast(grad_v, v.dtype),
    )


@lowering(
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    supports=_no_dropout_same_heads,
)
def flash_attention_for_cpu(
    query: TensorValue,
    key: TensorValue,
    value: TensorValue,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: TensorValue | None = None,
    scale: float | None = None,
) -> tuple[TensorValue, TensorValue]:
    """_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)"""
    return _forward(query, key, value, attn_mask, is_causal, scale)


@lowering(
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    supports=_no_dropout_same_heads,
)
def flash_attention_for_cpu_backward(
    grad_out: TensorValue,
    query: TensorValue,
    key: TensorValue,
    value: TensorValue,
    out: TensorValue,
    logsumexp: TensorValue,
    dropout_p: float,
    is_causal: bool,
    *,
    attn_mask: TensorValue | None = None,
    scale: float | None = None,
) -> tuple[TensorValue, TensorValue, TensorValue]:
    """_scaled_dot_product_flash_attention_for_cpu_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor logsumexp, float dropout_p, bool is_causal, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)"""
    return _backward(
        grad_out, query, key, value, out, logsumexp, attn_mask, is_causal, scale
    )
