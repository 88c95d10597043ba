"""The small transformers models the tests share.

One configuration per architecture, so that tests of one model build the
same MAX graphs where their inputs agree, and a change of size is made once.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

# 64 wide, 2 layers, 4 query heads over 2 key/value heads (grouped-query
# attention), a 256-token vocabulary.
TINY_LLAMA: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
}

TINY_GPT2: dict[str, Any] = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256}


def tiny_llama(**changes: Any) -> torch.nn.Module:
    """A LlamaForCausalLM of ``TINY_LLAMA`` with ``changes``, in eval mode."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(**{**TINY_LLAMA, **changes})
    return transformers.LlamaForCausalLM(config).eval()


def tiny_gpt2(**changes: Any) -> torch.nn.Module:
    """A GPT2LMHeadModel of ``TINY_GPT2`` with ``changes``, in eval mode."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(**{**TINY_GPT2, **changes})
    return transformers.GPT2LMHeadModel(config).eval()
