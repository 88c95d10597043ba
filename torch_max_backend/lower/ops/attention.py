"""Scaled dot-product attention, forward and backward, as fused-friendly MAX ops.

torch picks an attention kernel per device; on CPU the ATen graph holds
``_scaled_dot_product_flash_attention_for_cpu`` and its backward, lowered
here to one matmul/softmax formulation (in float32) that MAX fuses. The
backward recomputes the probabilities from the saved log-sum-exp instead of
storing them, as flash attention does.

Grouped- and multi-query attention (``enable_gqa``: fewer key/value heads
than query heads, each serving a group of consecutive query heads) never
copies K or V per query head: the query heads of a group are laid end to
end, ``[B, Hq, L, E]`` read as ``[B, Hkv, (Hq / Hkv) * L, E]`` (the same
memory), so one matmul per key/value head serves its whole group, and the
gradients of K and V sum over the group in that same matmul.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from max.dtype import DType
from max.graph import TensorValue, ops
from max.graph.ops.reduction import max as reduce_max

from ..bfloat16_rounding import cast_to
from ..context import derived_once, unread_output
from ..kit import device_of, fake_tensor, outputs_read, schema_args, unrepeated
from ..one_query_attention import one_query_attention, one_query_fits
from ..products import product, product_by_rows
from ..registry import Strategy, lowering, lowering_strategies
from ..scalars import as_tensor
from ..shapes import positions, static_size
from .elementwise import torch_exp

aten = torch.ops.aten


def _no_dropout_whole_groups(node: torch.fx.Node) -> str | None:
    """No dropout; the query heads split evenly over known key/value heads."""
    values = schema_args(node)
    q, k = fake_tensor(values["query"]), fake_tensor(values["key"])
    return attention_refusal(q, k, values.get("dropout_p", 0.0))


def attention_refusal(q: torch.Tensor, k: torch.Tensor, dropout_p: float) -> str | None:
    """Why attention of query ``q`` over keys ``k`` is not lowered, or None."""
    if dropout_p:
        return "attention with dropout_p > 0"
    if q.dim() != 4 or k.dim() != 4:
        return "attention on tensors that are not 4-D"
    if q.shape[:-2] == k.shape[:-2]:
        return None
    heads, kv_heads = q.shape[1], k.shape[1]
    if q.shape[0] != k.shape[0]:
        return "attention whose query and key batch sizes differ"
    if not isinstance(heads, int) or not isinstance(kv_heads, int):
        return "grouped-query attention with a symbolic number of heads"
    if kv_heads == 0 or heads % kv_heads:
        return f"{heads} query heads do not split over {kv_heads} key/value heads"
    return None


def _grouped(x: TensorValue, kv_heads: int) -> TensorValue:
    """``[B, Hq, L, X]`` as ``[B, kv_heads, (Hq / kv_heads) * L, X]``: the
    query heads of each group end to end, the same memory."""
    heads = static_size(x.shape[1])
    if heads == kv_heads:
        return x
    assert heads is not None and heads % kv_heads == 0
    rows = x.shape[2] * (heads // kv_heads)
    return ops.reshape(x, [x.shape[0], kv_heads, rows, x.shape[3]])


def _ungrouped(x: TensorValue, like: TensorValue) -> TensorValue:
    """``_grouped``'s reverse: back to ``like``'s ``[B, Hq, L]`` and ``x``'s last dim."""
    if static_size(x.shape[1]) == static_size(like.shape[1]):
        return x
    return ops.reshape(x, [*like.shape[:3], x.shape[3]])


def _grouped_matmul(
    a: TensorValue,
    b: TensorValue,
    like: TensorValue,
    times: Callable[[TensorValue, TensorValue], TensorValue] = product,
) -> TensorValue:
    """Per query head ``times(a, b)`` where ``b`` has one entry per key/value
    head; the result shaped as ``like``'s heads."""
    kv_heads = static_size(b.shape[1])
    assert kv_heads is not None
    return _ungrouped(times(_grouped(a, kv_heads), b), like)


def _scores(
    q: TensorValue,
    k: TensorValue,
    mask: TensorValue | None,
    is_causal: bool,
    scale: float | None,
    masked: float = -math.inf,
) -> tuple[TensorValue, TensorValue]:
    """Scaled, masked attention logits (in float32) and the scale used;
    ``masked`` is the logit of a key a boolean or causal mask hides."""
    e = static_size(q.shape[-1])
    factor = scale if scale is not None else 1 / math.sqrt(e or 1)
    qf = ops.cast(q, DType.float32)
    kf = ops.cast(k, DType.float32)
    s = ops.mul(
        _grouped_matmul(qf, kf, q, product_by_rows),
        as_tensor(factor, DType.float32),
    )
    hidden = as_tensor(masked, DType.float32)
    if mask is not None:
        if mask.dtype == DType.bool:
            s = ops.where(mask, s, hidden)
        else:
            s = ops.add(s, ops.cast(mask, DType.float32))
    if is_causal:
        rows = positions(q, q.rank - 2)
        cols = positions(k, k.rank - 2)
        keep = ops.greater_equal(ops.unsqueeze(rows, 1), ops.unsqueeze(cols, 0))
        s = ops.where(keep, s, hidden)
    return s, as_tensor(factor, DType.float32)


def _logsumexp(s: TensorValue) -> TensorValue:
    """Each row's log-sum-exp; 0 for a row whose keys are all masked, as
    torch's CPU kernel gives, so that its probabilities exp(-inf - 0) are
    zeros (a zero output and zero gradients) rather than exp(-inf + inf)."""
    peak = reduce_max(s, -1)
    zero = as_tensor(0.0, DType.float32)
    finite = ops.where(ops.is_inf(peak), zero, peak)
    # torch_exp: MAX's exp(NaN) is inf, which made a NaN key's row infinite.
    total = ops.sum(torch_exp(ops.sub(s, finite)), -1)
    # A row with a key has a total of at least exp(0); a row without one, 0.
    # Told by the total, not by the peak: testing the peak for -inf left such
    # rows NaN (tests/lower/ops/test_attention_masked_rows.py).
    lse = ops.where(ops.greater(total, zero), ops.add(ops.log(total), finite), zero)
    return ops.squeeze(lse, -1)


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
    p = torch_exp(ops.sub(s, ops.unsqueeze(lse, -1)))
    out = _grouped_matmul(p, ops.cast(v, DType.float32), q)
    return cast_to(out, q.dtype), lse


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
    kv_heads = static_size(k.shape[1])
    assert kv_heads is not None
    s, factor = _scores(q, k, mask, is_causal, scale)
    p = torch_exp(ops.sub(s, ops.unsqueeze(ops.cast(lse, DType.float32), -1)))
    do = ops.cast(grad_out, DType.float32)
    # K's and V's gradients sum over the query heads of their group: the
    # grouped layout's rows hold them all, so the matmul sums them.
    grad_v = product(
        ops.transpose(_grouped(p, kv_heads), -1, -2), _grouped(do, kv_heads)
    )
    dp = _grouped_matmul(do, ops.transpose(ops.cast(v, DType.float32), -1, -2), q)
    # d softmax: P * (dP - rowsum(dO * O)).
    delta = ops.sum(ops.mul(do, ops.cast(out, DType.float32)), -1)
    ds = ops.mul(ops.mul(p, ops.sub(dp, delta)), factor)
    grad_q = _grouped_matmul(ds, ops.cast(k, DType.float32), q)
    grad_k = product(
        ops.transpose(_grouped(ds, kv_heads), -1, -2),
        _grouped(ops.cast(q, DType.float32), kv_heads),
    )
    return (
        cast_to(grad_q, q.dtype),
        cast_to(grad_k, k.dtype),
        cast_to(grad_v, v.dtype),
    )


def _lse_unread_on_cpu(node: torch.fx.Node) -> str | None:
    """Nothing reads the log-sum-exp output (inference); on the CPU."""
    if device_of(fake_tensor(schema_args(node)["query"])).type != "cpu":
        # What MAX compiles the inference forms into, and what they cost,
        # was checked on the CPU only: a GPU graph keeps the log-sum-exp.
        return "not on the CPU"
    if outputs_read(node) - {0}:
        return "the log-sum-exp is read (a training graph saves it)"
    return None


def _lse_unread(node: torch.fx.Node) -> str | None:
    """Nothing reads the log-sum-exp output (inference); as many key/value heads as query heads; on the CPU."""
    reason = _lse_unread_on_cpu(node)
    if reason is not None:
        return reason
    values = schema_args(node)
    q, k = fake_tensor(values["query"]), fake_tensor(values["key"])
    repeated = [unrepeated(values[name]) for name in ("key", "value")]
    if q.shape[1] != k.shape[1] or any(r is not None for r in repeated):
        # MAX's flash attention kernel, fed the grouped layout and a mask,
        # gave NaN rows (max 26.7; a left-padded llama's logits). Keys and
        # values repeated per query head reach the lowering grouped as well,
        # each on its own: under autocast a llama's keys are cast after the
        # repeat (so they arrive repeated) and its values are not.
        return "grouped-query attention (MAX's flash kernel mishandles it)"
    return None


def _one_query_unread(node: torch.fx.Node) -> str | None:
    """One float32 query row a head (a decode step) on the CPU, nothing reading the log-sum-exp, no is_causal, heads of at most 256 values, at most 16 query heads a key/value head."""
    return _lse_unread_on_cpu(node) or one_query_fits(node)


_LOWEST = float(torch.finfo(torch.float32).min)


def _rows_with_a_key(mask: TensorValue | None) -> TensorValue | None:
    """Where the mask leaves a query row at least one key (``[..., L, 1]``),
    or None where there is no mask."""
    if mask is None:
        return None

    def rows() -> TensorValue:
        if mask.dtype == DType.bool:
            kept = ops.cast(mask, DType.float32)
        else:
            kept = ops.cast(
                ops.greater(mask, as_tensor(-math.inf, mask.dtype)), DType.float32
            )
        return ops.greater(reduce_max(kept, -1), as_tensor(0.0, DType.float32))

    # Every layer of a transformer attends under the same mask.
    return derived_once("rows with a key", mask, rows)


def _inference(
    q: TensorValue,
    k: TensorValue,
    v: TensorValue,
    mask: TensorValue | None,
    is_causal: bool,
    scale: float | None,
) -> tuple[TensorValue, TensorValue]:
    # MAX compiles matmul, softmax and matmul into its CPU flash attention
    # kernel, one kernel where the log-sum-exp and the probabilities from it
    # are five (compile time follows the kernel count). That kernel takes
    # a mask as an additive one, which MAX makes from a boolean mask as
    # (not mask) * fill: a fill of -inf made 0 * -inf = NaN of every kept key,
    # so hidden keys get the lowest finite logit instead. A row whose keys
    # are all hidden then averages them where torch's kernel gives zeros:
    # those rows are told by the mask alone, which every layer shares. NaN
    # and infinite scores give NaN rows, as torch's, but so does a NaN score
    # the mask hides (the kernel adds the mask to it), which torch hides.
    s, _ = _scores(q, k, mask, is_causal, scale, masked=_LOWEST)
    out = _grouped_matmul(ops.softmax(s), ops.cast(v, DType.float32), q)
    keys = _rows_with_a_key(mask)
    if keys is not None:
        out = ops.where(keys, out, as_tensor(0.0, DType.float32))
    return cast_to(out, q.dtype), unread_output()


def _inference_grouped(
    q: TensorValue,
    k: TensorValue,
    v: TensorValue,
    mask: TensorValue | None,
    is_causal: bool,
    scale: float | None,
) -> tuple[TensorValue, TensorValue]:
    # Grouped heads keep off MAX's softmax (its flash kernel, above), but
    # need no log-sum-exp either: exps over their row sums leave out the log,
    # the second exp and its NaN check and the adds and reshapes around them
    # (one division more): eight MAX ops a layer fewer in a tiny llama's
    # graph, each a few microseconds a call (docs/benchmarks.md).
    # A row whose keys are all hidden sums to 0 and gives 0 / 0: those rows
    # are told by the mask, as in _inference, and give zeros as torch's.
    s, _ = _scores(q, k, mask, is_causal, scale)
    peak = reduce_max(s, -1)
    zero = as_tensor(0.0, DType.float32)
    exps = torch_exp(ops.sub(s, ops.where(ops.is_inf(peak), zero, peak)))
    p = ops.div(exps, ops.sum(exps, -1))
    out = _grouped_matmul(p, ops.cast(v, DType.float32), q)
    keys = _rows_with_a_key(mask)
    if keys is not None:
        out = ops.where(keys, out, zero)
    return cast_to(out, q.dtype), unread_output()


def _attention_by(
    forward: Callable[..., tuple[TensorValue, TensorValue]],
) -> Callable[..., tuple[TensorValue, TensorValue]]:
    """The flash attention op's lowering around one way of computing it."""

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
        return forward(query, key, value, attn_mask, is_causal, scale)

    return flash_attention_for_cpu


flash_attention_for_cpu = lowering_strategies(
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    supports=_no_dropout_whole_groups,
    candidates=[
        Strategy("one_query", _attention_by(one_query_attention), _one_query_unread),
        Strategy("softmax", _attention_by(_inference), _lse_unread),
        Strategy("exp_over_sum", _attention_by(_inference_grouped), _lse_unread_on_cpu),
        Strategy("log_sum_exp", _attention_by(_forward)),
    ],
)


@lowering(
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    supports=_no_dropout_whole_groups,
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
