"""The decode benchmark's models and how each generate() is driven: GPT-2
small and a llama-style model, exactly N greedy tokens, a clock read after
each token, and the bytes a decode step must read."""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from benchmarks import device


def build(name: str) -> Any:
    """GPT-2 small (12 layers, 768 wide, tied LM head) or a llama-style model
    with grouped-query attention (8 query and 4 key/value heads)."""
    import transformers

    if name == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config())
    config = transformers.LlamaConfig(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=32000,
        tie_word_embeddings=False,
    )
    return transformers.LlamaForCausalLM(config)


class StepClock:
    """A stopping criterion that never stops: it reads the clock after each
    token (the device synchronized first), so that a decode step's time is
    the time between two tokens, the prefill's left out."""

    def __init__(
        self, batch: int, where: str, now: Callable[[], float] = time.perf_counter
    ) -> None:
        import torch

        self._never = torch.zeros(batch, dtype=torch.bool, device=where)
        self._where = where
        self._now = now
        self.stamps: list[float] = []

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        device.synchronize(self._where)
        self.stamps.append(self._now())
        return self._never

    def steps(self) -> list[float]:
        """Seconds between consecutive tokens: one per decode step."""
        return [b - a for a, b in pairwise(self.stamps)]


def generate_exactly(
    model: Any,
    ids: Any,
    new: int,
    capacity: int,
    config: Any = None,
    clock: StepClock | None = None,
) -> Any:
    """``new`` greedy tokens after ``ids``, always that many: the model's end
    of sequence is switched off (its weights are random) rather than forced
    away with ``min_new_tokens``, whose two logits processors mask the whole
    vocabulary at every step, in PyTorch, whatever the backend. ``clock``
    stamps each token."""
    from transformers import StoppingCriteriaList

    model.generation_config.eos_token_id = None
    return model.generate(
        ids,
        max_new_tokens=new,
        do_sample=False,
        cache_implementation="static",
        max_cache_len=capacity,
        compile_config=config,
        stopping_criteria=StoppingCriteriaList([clock] if clock else []),
    )


def _bytes_per_step(model: Any, batch: int, cache_tokens: float) -> float:
    """Weights read once (shared storage once) plus the K and V attended. A
    lookup table that no other layer reads (an untied input embedding, GPT-2's
    positions) gives one row per sequence, as a step gathers it; tied to the
    LM head, it is read whole once."""
    import torch

    tables = {
        m.weight.data_ptr()
        for m in model.modules()
        if isinstance(m, torch.nn.Embedding)
    }
    read_whole = {
        p.data_ptr()
        for m in model.modules()
        if not isinstance(m, torch.nn.Embedding)
        for p in m.parameters(recurse=False)
    }
    seen, weights = set(), 0
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        if p.data_ptr() in tables and p.data_ptr() not in read_whole:
            weights += batch * p.shape[-1] * p.element_size()
        else:
            weights += p.numel() * p.element_size()
    text = model.config.get_text_config()
    heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = text.hidden_size // text.num_attention_heads
    kv = 2 * text.num_hidden_layers * heads * head_dim * 4 * cache_tokens * batch
    return weights + kv
