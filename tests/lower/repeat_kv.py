"""transformers' repeat_kv, written as its models write it, for tests of
attention over key/value heads repeated per query head."""

from __future__ import annotations

import torch


def repeat_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """Each key/value head of ``x`` [B, H, L, E] once per query head of its group."""
    b, heads, length, width = x.shape
    x = x[:, :, None, :, :].expand(b, heads, group, length, width)
    return x.reshape(b, heads * group, length, width)
