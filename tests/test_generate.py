"""transformers' generate() with a static KV cache, compiled with
CompileConfig(backend="max") and its defaults: the same greedy tokens as
eager, one MAX graph for every decode step, none compiled again for a
second generate() of the same shape."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from tiny_models import tiny_gpt2, tiny_llama  # noqa: E402
from transformers.generation.configuration_utils import CompileConfig  # noqa: E402

from torch_max_backend import compile_stats, reset_compile_stats  # noqa: E402

NEW_TOKENS = 5


def _generate(model: torch.nn.Module, ids: torch.Tensor, compile_config=None):
    return model.generate(
        ids,
        max_new_tokens=NEW_TOKENS,
        do_sample=False,
        cache_implementation="static",
        compile_config=compile_config,
    )


@pytest.mark.parametrize("build", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_generate_with_a_static_cache_matches_eager_with_one_decode_graph(
    max_calls, build
):
    torch.manual_seed(0)
    model = build()
    ids = torch.randint(0, 256, (2, 7))
    expected = _generate(model, ids)
    config = CompileConfig(backend="max")  # mode="reduce-overhead" by default
    config._compile_all_devices = True  # transformers compiles on CPU only so
    reset_compile_stats()
    torch.testing.assert_close(_generate(model, ids, config), expected, rtol=0, atol=0)
    first = compile_stats()
    assert first.graphs_built + first.warm_starts == 1  # the decode step
    decode_steps = max_calls.of("inference")
    assert decode_steps == NEW_TOKENS - 1  # the prefill runs eagerly
    reset_compile_stats()
    torch.testing.assert_close(_generate(model, ids, config), expected, rtol=0, atol=0)
    again = compile_stats()
    assert again.graphs_built == again.warm_starts == again.max_compiles == 0
    assert max_calls.of("inference") == 2 * decode_steps


def test_generate_at_a_second_batch_size_runs_its_decode_graph_on_max(
    max_calls, monkeypatch
):
    # A second batch size makes Dynamo hand over a decode graph whose batch
    # is symbolic; MAX compiled it (it crashed MAX's compiler, and the step
    # ran in PyTorch, while the cache was read outside its store's condition).
    monkeypatch.setenv("TORCH_MAX_BACKEND_STRICT", "1")
    torch.manual_seed(0)
    model = tiny_gpt2()
    config = CompileConfig(backend="max")
    config._compile_all_devices = True
    for batch in (2, 3):
        ids = torch.randint(0, 256, (batch, 7))
        expected = _generate(model, ids)
        before = max_calls.of("inference")
        torch.testing.assert_close(
            _generate(model, ids, config), expected, rtol=0, atol=0
        )
        assert max_calls.of("inference") - before == NEW_TOKENS - 1
