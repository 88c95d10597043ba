"""Real models end to end: a GPT-2 from a transformers config, random weights."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import compile_stats, max_backend, reset_compile_stats

transformers = pytest.importorskip("transformers")


def test_gpt2_logits_match_eager(max_calls):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (2, 16))

    def logits(input_ids):
        return model(input_ids, use_cache=False).logits

    with torch.no_grad():
        expected = logits(ids)
        got = torch.compile(logits, backend=max_backend, fullgraph=True)(ids)
    # fp32 with reordered reductions (layer norm, softmax, matmul): 1e-4 covers
    # the differences seen over many seeds by a wide margin.
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert max_calls.of("inference") == 1


def _gpt2_sizes(compiled, logits, sizes, vocab: int) -> None:
    for batch, seq in sizes:
        ids = torch.randint(0, vocab, (batch, seq))
        torch._dynamo.mark_dynamic(ids, 0)
        torch._dynamo.mark_dynamic(ids, 1)
        with torch.no_grad():
            torch.testing.assert_close(compiled(ids), logits(ids), rtol=1e-4, atol=1e-4)


def test_gpt2_dynamic_batch_and_sequence_share_one_max_graph(max_calls):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4)
    model = transformers.GPT2LMHeadModel(config).eval()

    def logits(input_ids):
        return model(input_ids, use_cache=False).logits

    compiled = torch.compile(
        logits, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    reset_compile_stats()
    # Every batch >= 2 and every length share one graph. (Dynamo specializes a
    # dim of size 1, its "0/1 specialization": batch 1 would be a graph of its
    # own, a compile this test leaves out.)
    _gpt2_sizes(compiled, logits, [(2, 33), (4, 128), (3, 20)], 1000)
    marked = compile_stats()
    assert marked.graphs_built + marked.warm_starts == 1  # built, or warm
    assert marked.max_compiles + marked.cache_hits == 1
    assert max_calls.of("inference") == 3

    # dynamic=True: every size symbolic from the first call on. Its graph
    # differs from the one above (Python floats become graph inputs too).
    torch._dynamo.reset()
    everything = torch.compile(
        logits, backend=max_backend, dynamic=True, options={"strict": True}
    )
    reset_compile_stats()
    _gpt2_sizes(everything, logits, [(2, 40), (5, 64), (3, 9)], 1000)
    stats = compile_stats()
    assert stats.graphs_built + stats.warm_starts == 1
    assert stats.max_compiles + stats.cache_hits == 1
    assert max_calls.of("inference") == 6


def test_explain_gpt2_lists_every_op_on_max_and_no_graph_breaks():
    from torch_max_backend import explain

    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 1000, (2, 16))
    report = explain(lambda i: model(i, use_cache=False).logits, ids)
    assert report.graph_breaks == []
    (graph,) = report.graphs
    ops = {op.op: op for op in graph.ops}
    assert ops["aten.addmm.default"].count == 2 * 4  # 4 projections per layer
    assert ops["aten.native_layer_norm.default"].count == 2 * 2 + 1
    assert all(op.on_max for op in graph.ops)
    assert report.unsupported == {}
    assert "aten.addmm.default" in report.table()


def test_swin_training_step_runs_on_max_and_matches_eager(max_calls, built_graphs):
    """Window partition and reverse, shifted windows, relative position bias:
    forward and backward on MAX (strict: no op left to PyTorch), gradients
    equal to eager's. The backward holds as_strided_scatter (the pooler's)."""
    config = transformers.SwinConfig(
        image_size=32,
        patch_size=4,
        embed_dim=16,
        depths=[2],
        num_heads=[2],
        window_size=4,
        num_labels=5,
        drop_path_rate=0.0,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    eager = transformers.SwinForImageClassification(config).train()
    ours = transformers.SwinForImageClassification(config).train()
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(2, 3, 32, 32)

    def loss_of(model):
        return lambda pixels: model(pixel_values=pixels).logits.square().mean()

    expected = loss_of(eager)(x)
    expected.backward()
    compiled = torch.compile(
        loss_of(ours), backend=max_backend, options={"strict": True}
    )
    got = compiled(x)
    got.backward()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    for (name, p_max), p_eager in zip(
        ours.named_parameters(), eager.parameters(), strict=True
    ):
        torch.testing.assert_close(
            p_max.grad, p_eager.grad, rtol=1e-4, atol=1e-5, msg=name
        )
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
    ops = built_graphs.ops()
    assert "aten.as_strided_scatter.default" in ops
    assert "aten.as_strided.default" in ops
