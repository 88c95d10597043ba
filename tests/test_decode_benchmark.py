"""The decode benchmark's plumbing: the bytes a decode step must read, its
table (ratios, the bandwidth bound and its share, tokens compared) and its
docs section. Cheap: nothing compiles; the figures come from running
``python -m benchmarks.decode`` itself."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from benchmarks import decode  # noqa: E402


def test_a_tied_weight_is_read_once_and_the_cache_per_token_attended():
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100)
    model = transformers.GPT2LMHeadModel(config)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    # Unique parameters; the position table (1024 x 64) is only looked up:
    # one row per sequence is read of it.
    positions = model.transformer.wpe.weight.numel()
    weights = 4 * (sum(p.numel() for p in model.parameters()) - positions)
    kv = 2 * 2 * 4 * 16 * 4  # K and V, layers, heads, head width, float32
    row = 64 * 4
    assert decode._bytes_per_step(model, 1, 10) == weights + row + 10 * kv
    assert decode._bytes_per_step(model, 8, 10) == weights + 8 * row + 80 * kv


def test_an_untied_input_embedding_is_looked_up_not_read_whole():
    # A llama-style model's input embedding is as large as its LM head, but a
    # decode step gathers one row of it per sequence: counting it whole would
    # lower the bandwidth bound and flatter every backend's share of it.
    config = transformers.LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=500,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config)
    table = model.model.embed_tokens.weight.numel()
    weights = 4 * (sum(p.numel() for p in model.parameters()) - table)
    kv = 2 * 1 * 2 * 8 * 4  # K and V, one layer, two heads of 8, float32
    assert decode._bytes_per_step(model, 2, 5) == weights + 2 * 32 * 4 + 10 * kv


def test_generate_exactly_gives_every_token_with_no_logits_processor(monkeypatch):
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50)
    model = transformers.GPT2LMHeadModel(config).eval()
    processors = []
    original = model._get_logits_processor

    def spy(*args, **kwargs):
        processors.append(original(*args, **kwargs))
        return processors[-1]

    monkeypatch.setattr(model, "_get_logits_processor", spy)
    ids = torch.randint(0, 50, (2, 4))
    with torch.no_grad():
        out = decode.generate_exactly(model, ids, 6, capacity=11)
    assert out.shape == (2, 10)
    assert [len(p) for p in processors] == [0]


def test_the_step_clock_times_each_decode_step_and_never_stops():
    # Decode speed comes from the time between consecutive tokens: the
    # prefill's time, and how it varies from one generate() to the next, stay
    # out of it.
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50)
    model = transformers.GPT2LMHeadModel(config).eval()
    ticks = iter(range(100))
    clock = decode.StepClock(batch=2, where="cpu", now=lambda: float(next(ticks)))
    ids = torch.randint(0, 50, (2, 4))
    with torch.no_grad():
        out = decode.generate_exactly(model, ids, 6, capacity=11, clock=clock)
    assert out.shape == (2, 10)  # every token: the clock stopped nothing
    # One stamp per token, the prefill's first: five steps between six.
    assert clock.steps() == [1.0] * 5


def _figures(tokens_per_s: float, tokens: list) -> dict:
    return {
        "1": {
            "tokens_per_s": tokens_per_s,
            "first_token_s": 2.0,
            "bytes_per_step": 1e9,
            "tokens": tokens,
        }
    }


def test_table_gives_ratios_bound_share_and_token_agreement():
    results = {
        "gpt2": {
            "eager": _figures(10.0, [[1, 2]]),
            "inductor": _figures(20.0, [[1, 2]]),
            "max": _figures(30.0, [[1, 2]]),
            "max_passive": _figures(40.0, [[1, 3]]),
            "max_one_thread": _figures(50.0, [[1, 2]]),
        }
    }
    (row,) = decode._rows(results, gbps=80.0)
    assert row[:7] == ["gpt2", "1", "10.0", "20.0", "30.0", "40.0", "50.0"]
    # Against eager and Inductor: max, passive, one torch thread.
    assert row[7:13] == ["3.00x", "1.50x", "4.00x", "2.00x", "5.00x", "2.50x"]
    assert row[13] == "80 (62%)"  # the fastest max run's share of the bound
    assert row[14] == "NO"  # the passive run's tokens differ from eager's
    assert len(row) == len(decode.HEADERS)


def test_table_marks_a_backend_whose_graph_ran_in_pytorch():
    # A decode graph MAX failed to compile runs in PyTorch with a
    # FallbackWarning; its speed is not max_backend's and must not read so.
    results = {
        "gpt2": {
            "eager": _figures(10.0, [[1, 2]]),
            "inductor": _figures(20.0, [[1, 2]]),
            "max": _figures(30.0, [[1, 2]]),
        }
    }
    results["gpt2"]["max"]["1"]["fallbacks"] = 2
    (row,) = decode._rows(results, gbps=80.0)
    assert row[4] == "30.0 (ran in PyTorch)"
    assert row[5] == row[6] == "failed"  # no passive or one-thread run


def test_docs_section_is_replaced_for_this_cpu_vendor_only(tmp_path, monkeypatch):
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    here = decode.vendor_label(decode.machine())
    other = "Intel" if here == "AMD" else "AMD"
    (b1, e1), (b2, e2) = decode.docs_markers(here), decode.docs_markers(other)
    page.write_text(f"# B\n\n{b1}\nold\n{e1}\n\n{b2}\nkept\n{e2}\n\n## After\n")
    monkeypatch.setattr(decode, "ROOT", tmp_path)
    decode.write_docs(f"{b1}\nnew\n{e1}")
    text = page.read_text()
    assert "new" in text and "old" not in text and "kept" in text
    assert text.endswith("## After\n")


def test_first_token_table_reads_full_and_first_only_runs():
    results = {
        "llama": {
            "eager": _figures(10.0, [[1]]),
            "inductor": _figures(20.0, [[1]]),
            "inductor_warm": {"first_token_s": 1.25},
            "max": _figures(30.0, [[1]]),
            "max_warm": {"first_token_s": 3.0},
            "max_background": {},  # failed
        }
    }
    (row,) = decode._first_token_rows(results, "1")
    assert row == ["llama", "2.0", "2.0", "1.2", "2.0", "3.0", "-"]


def test_the_decode_section_names_the_options_it_ran_with():
    import argparse

    from benchmarks import decode_docs

    args = argparse.Namespace(
        prompt=32,
        new_tokens=32,
        runs=5,
        repeat=1,
        batches=[1, 8],
        caches="user",
        command="python -m benchmarks.decode --caches user --docs",
    )
    read = {"gbps": 20.0, "how": "torch.sum"}
    text = decode_docs.markdown(("speed", "first"), args, read, 14.0)
    assert "`python -m benchmarks.decode --caches user --docs`, 14 minutes" in text
    # Over the user's caches the first processes' caches were not empty.
    assert "*user's caches*" in text and "*empty caches*" not in text
    assert "max, user's caches" in decode.first_token_headers("user")
    assert "max, empty caches" in decode.first_token_headers("cold")


def test_repeated_processes_take_turns_and_the_speed_is_their_median(monkeypatch):
    """--repeat N: after the first round (with its warm and max-variant
    processes) eager, Inductor and max run N - 1 more times, taking turns,
    each round starting with the next backend; each backend's speed per
    batch size is its median process."""
    import argparse

    spawned: list[tuple[str, bool, bool]] = []
    steps = {"eager": iter([30.0, 10.0, 20.0]), "inductor": iter([9.0, 9.0, 9.0])}
    steps["max"] = iter([5.0, 8.0, 4.0])

    def spawn(name, backend, args, env, first_only=False, torch_threads=0):
        variant = "OMP_WAIT_POLICY" in env or torch_threads
        spawned.append((backend, first_only, variant))
        if first_only:
            return {"first_token_s": 1.0}
        step = 7.0 if variant else next(steps[backend])
        figures = {"step_ms": step, "tokens_per_s": 1e3 / step, "fallbacks": 0}
        return {"1": {**figures, "tokens": [[1]], "first_token_s": 2.0}}

    monkeypatch.setattr(decode, "_spawn", spawn)
    args = argparse.Namespace(caches="user", repeat=3)
    runs = decode._model_runs("gpt2", args)
    steady = [b for b, first, variant in spawned if not first and not variant]
    assert steady == [
        *("eager", "inductor", "max"),
        *("inductor", "max", "eager"),
        *("max", "eager", "inductor"),
    ]
    assert runs["eager"]["1"]["step_ms"] == 20.0
    assert runs["eager"]["1"]["process_step_ms"] == [30.0, 10.0, 20.0]
    assert runs["max"]["1"]["tokens_per_s"] == pytest.approx(1e3 / 5.0)
    assert runs["max_passive"]["1"]["step_ms"] == 7.0  # measured once
    with pytest.raises(SystemExit):
        decode.main(["--repeat", "0"])
