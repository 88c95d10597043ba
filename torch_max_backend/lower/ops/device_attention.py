"""torch's GPU attention kernels, rewritten while tracing to the attention op
this package lowers.

On a GPU, ``scaled_dot_product_attention`` reaches the ATen graph as one of
torch's CUDA kernels (flash, memory-efficient or cuDNN attention, by dtype,
mask and card), each with its own outputs: a padded or 4-D log-sum-exp,
random-number state for dropout, sequence bookkeeping. Each is rewritten
into ``_scaled_dot_product_flash_attention_for_cpu`` (whose meta function,
and so its tracing, is device-agnostic despite its name), and each backward
into that op's backward, so that every device shares attention.py's one
formulation, its grouped-query handling and its training path. The random
state of a call without dropout is zeros; nothing reads it.

A call the lowering would refuse (dropout, query heads that do not split over
the key/value heads) is left as it is, so that PyTorch runs it. The rewritten
op has no CUDA kernel of torch's: were its lowering to fail while a GPU graph
is built, the eager fallback of that node would fail too, naming the op.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..registry import decomposition
from .attention import attention_refusal

aten = torch.ops.aten
_ATTENTION = aten._scaled_dot_product_flash_attention_for_cpu.default
_ATTENTION_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
# What a rewrite returns: the op's outputs, or NotImplemented to keep the op.
Rewritten = Any


def _refused(query: Tensor, key: Tensor, dropout_p: float) -> bool:
    return attention_refusal(query, key, dropout_p) is not None


def _zeros(
    like: Tensor, shape: tuple[int | torch.SymInt, ...], dtype: torch.dtype
) -> Tensor:
    return torch.zeros(shape, dtype=dtype, device=like.device)


@decomposition(aten._scaled_dot_product_efficient_attention.default)
def efficient_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_bias: Tensor | None,
    compute_log_sumexp: bool,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
) -> Rewritten:
    if _refused(query, key, dropout_p):
        return NotImplemented
    out, lse = _ATTENTION(
        query, key, value, dropout_p, is_causal, attn_mask=attn_bias, scale=scale
    )
    rows = query.shape[2]
    # The kernel pads the log-sum-exp's rows to a multiple of 32 (none when
    # it is not asked for); its backward reads the first ``rows``.
    padded = math.ceil(rows / 32) * 32 if compute_log_sumexp else 0
    if padded:
        lse = torch.nn.functional.pad(lse, (0, padded - rows))
    else:
        lse = _zeros(query, (*query.shape[:2], 0), torch.float32)
    seed = _zeros(query, (), torch.int64)
    return out, lse, seed, seed.clone()


@decomposition(aten._scaled_dot_product_efficient_attention_backward.default)
def efficient_attention_backward(
    grad_out: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_bias: Tensor | None,
    out: Tensor,
    logsumexp: Tensor,
    philox_seed: Tensor | None,
    philox_offset: Tensor | None,
    dropout_p: float,
    grad_input_mask: Sequence[bool],
    is_causal: bool = False,
    *,
    scale: float | None = None,
) -> Rewritten:
    if _refused(query, key, dropout_p) or grad_input_mask[3]:
        return NotImplemented  # a bias that wants its gradient: PyTorch's
    lse = logsumexp[..., : query.shape[2]]
    grads = _ATTENTION_BACKWARD(
        grad_out,
        query,
        key,
        value,
        out,
        lse,
        dropout_p,
        is_causal,
        attn_mask=attn_bias,
        scale=scale,
    )
    return (*grads, None)


@decomposition(aten._scaled_dot_product_flash_attention.default)
def flash_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    *,
    scale: float | None = None,
) -> Rewritten:
    if _refused(query, key, dropout_p) or return_debug_mask:
        return NotImplemented
    out, lse = _ATTENTION(query, key, value, dropout_p, is_causal, scale=scale)
    rng_state = _zeros(query, (2,), torch.int64)
    unused = _zeros(query, (), torch.int64)
    debug = _zeros(query, (0,), query.dtype)
    max_q, max_k = query.shape[2], key.shape[2]
    return out, lse, None, None, max_q, max_k, rng_state, unused, debug


@decomposition(aten._scaled_dot_product_flash_attention_backward.default)
def flash_attention_backward(
    grad_out: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    logsumexp: Tensor,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int | torch.SymInt,
    max_k: int | torch.SymInt,
    dropout_p: float,
    is_causal: bool,
    philox_seed: Tensor | None,
    philox_offset: Tensor | None,
    *,
    scale: float | None = None,
) -> Rewritten:
    if _refused(query, key, dropout_p):
        return NotImplemented
    return _ATTENTION_BACKWARD(
        grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, scale=scale
    )


@decomposition(aten._scaled_dot_product_cudnn_attention.default)
def cudnn_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_bias: Tensor | None,
    compute_log_sumexp: bool,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    *,
    scale: float | None = None,
) -> Rewritten:
    if _refused(query, key, dropout_p) or return_debug_mask:
        return NotImplemented
    out, lse = _ATTENTION(
        query, key, value, dropout_p, is_causal, attn_mask=attn_bias, scale=scale
    )
    seed = _zeros(query, (), torch.int64)
    max_q, max_k = query.shape[2], key.shape[2]
    # cuDNN's log-sum-exp has a trailing dim of 1.
    lse = lse.unsqueeze(-1)
    return out, lse, None, None, max_q, max_k, seed, seed.clone(), None


@decomposition(aten._scaled_dot_product_cudnn_attention_backward.default)
def cudnn_attention_backward(
    grad_out: Tensor,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    out: Tensor,
    logsumexp: Tensor,
    philox_seed: Tensor | None,
    philox_offset: Tensor | None,
    attn_bias: Tensor | None,
    cum_seq_q: Tensor | None,
    cum_seq_k: Tensor | None,
    max_q: int | torch.SymInt,
    max_k: int | torch.SymInt,
    dropout_p: float,
    is_causal: bool,
    *,
    scale: float | None = None,
) -> Rewritten:
    if _refused(query, key, dropout_p):
        return NotImplemented
    return _ATTENTION_BACKWARD(
        grad_out,
        query,
        key,
        value,
        out,
        logsumexp.squeeze(-1),
        dropout_p,
        is_causal,
        attn_mask=attn_bias,
        scale=scale,
    )
