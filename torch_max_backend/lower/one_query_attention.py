"""A decode step's attention, one query row a head, as one Mojo kernel.

At one query row the scores are a few dot products a head and the output a
weighted sum of the value rows: written out as MAX ops (products, softmax,
the masked rows' check) they are several kernels that each pass over the
scores, and neither the summed nor the matmul form of the products has
anything to reuse. Eight layers of batch-8 decode attention took 2.6 ms
summed and 3.2 on MAX's matmul against 1.1 for PyTorch's kernel (Intel Xeon,
2 cores; docs/benchmarks.md). The kernel (kernels/mojo_attention/) reads
each key and value row once for every query head that shares it and keeps
the softmax as a running maximum and sum.
"""

from __future__ import annotations

import math

import torch
from max.dtype import DType
from max.graph import TensorType, TensorValue, ops

from ..kernels.library import ATTENTION, custom
from .context import derived_once, unread_output
from .kit import fake_tensor, schema_args
from .scalars import as_tensor
from .shapes import static_size

# The kernel's bounds: the widest head and the most query heads a key/value
# head serves (its running sums are on the stack).
_MOST_DIM = 256
_MOST_GROUP = 16


def one_query_fits(node: torch.fx.Node) -> str | None:
    """One float32 query row a head (a decode step), no is_causal, heads of
    at most 256 values, at most 16 query heads a key/value head; where the
    attention runs and what reads it are attention.py's to check."""
    values = schema_args(node)
    q, k = fake_tensor(values["query"]), fake_tensor(values["key"])
    v = fake_tensor(values["value"])
    if q.shape[2] != 1:
        return "more than one query row a head"
    if any(t.dtype != torch.float32 for t in (q, k, v)):
        return "query, key or value not float32"
    if values.get("is_causal", False):
        return "is_causal (one query row sees only the first key)"
    dim, heads, kv_heads = q.shape[3], q.shape[1], k.shape[1]
    if not all(isinstance(s, int) for s in (dim, heads, kv_heads, k.shape[3])):
        return "symbolic head sizes"
    if dim > _MOST_DIM or k.shape[3] != dim or v.shape[3] != dim:
        return f"heads of {dim} values (the kernel takes up to {_MOST_DIM}, as wide as the values)"
    if heads // kv_heads > _MOST_GROUP:
        return f"more than {_MOST_GROUP} query heads a key/value head"
    mask = values.get("attn_mask")
    if mask is not None and fake_tensor(mask).dim() > 4:
        return "a mask of more than 4 dimensions"
    return None


def _additive_mask(
    mask: TensorValue | None, q: TensorValue, keys: TensorValue
) -> TensorValue:
    """The mask as the kernel takes it: float32 to add to the scores, [Bm,
    Hm, T] with Bm 1 or the batch and Hm 1 or the query heads; a hidden key
    of a boolean mask at -inf (its weight 0: a row with none left gives
    zeros, as PyTorch's kernel). Built once for every layer it serves."""
    length = keys.shape[2]
    if mask is None:
        return ops.broadcast_to(as_tensor(0.0, DType.float32), [1, 1, length])
    # Batch and heads stay 1 where the mask broadcasts them (every layer's
    # mask is then a small tensor); the key axis is always spelled out.
    padded = [1] * (4 - mask.rank) + list(mask.shape)
    batch = 1 if static_size(padded[0]) == 1 else q.shape[0]
    heads = 1 if static_size(padded[1]) == 1 else q.shape[1]

    def additive() -> TensorValue:
        if mask.dtype == DType.bool:
            zero = as_tensor(0.0, DType.float32)
            hidden = as_tensor(-math.inf, DType.float32)
            scores = ops.where(mask, zero, hidden)
        else:
            scores = ops.cast(mask, DType.float32)
        scores = ops.reshape(scores, padded)
        scores = ops.broadcast_to(scores, [batch, heads, 1, length])
        return ops.reshape(scores, [batch, heads, length])

    return derived_once(f"one-query mask {batch} {heads} {length}", mask, additive)


def one_query_attention(
    q: TensorValue,
    k: TensorValue,
    v: TensorValue,
    mask: TensorValue | None,
    is_causal: bool,
    scale: float | None,
) -> tuple[TensorValue, TensorValue]:
    """Attention of ``q`` [B, Hq, 1, D] over ``k`` and ``v`` [B, Hkv, T, D]:
    [B, Hq, 1, D], and the log-sum-exp output, which nothing reads."""
    del is_causal  # refused by one_query_fits
    dim = static_size(q.shape[3])
    factor = scale if scale is not None else 1 / math.sqrt(dim or 1)
    rows = ops.reshape(q, [q.shape[0], q.shape[1], q.shape[3]])
    (out,) = custom(
        ATTENTION,
        "torch_max_backend_one_query_attention",
        [
            rows,
            k,
            v,
            _additive_mask(mask, q, k),
            ops.constant([factor], DType.float32, device=q.device),
        ],
        [TensorType(DType.float32, rows.shape, q.device)],
        q.device,
    )
    return ops.reshape(out, q.shape), unread_output()
