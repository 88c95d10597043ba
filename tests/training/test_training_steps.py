"""Whole training steps on MAX match eager PyTorch over five steps.

Each model trains eagerly and compiled from the same initial weights on the
same batches; losses, parameters, gradients, buffers (batch norm's running
statistics) and optimizer state must agree after every run. The forward,
backward and optimizer-step graphs must all have run on MAX at every step.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from tiny_models import tiny_llama

from torch_max_backend.pipeline.fallback import FallbackWarning
from torch_max_backend.runtime.compiled_graph import CompiledGraph

from .helpers import assert_same_training, train_both

STEPS = 5


def _regression_batches(n_in: int, n_out: int) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(8, n_in, generator=g), torch.randn(8, n_out, generator=g))
        for _ in range(STEPS)
    ]


class PointerLog:
    """Data pointers of forward outputs and of backward inputs, per call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.forward_out: set[int] = set()
        self.backward_in: list[torch.Tensor] = []
        original = CompiledGraph.__call__

        def logged(graph: CompiledGraph, args: list) -> list:
            if graph.name.startswith("backward"):
                self.backward_in += [a for a in args if isinstance(a, torch.Tensor)]
            out = original(graph, args)
            if graph.name.startswith("forward"):
                self.forward_out |= {
                    o.data_ptr() for o in out if isinstance(o, torch.Tensor)
                }
            return out

        monkeypatch.setattr(CompiledGraph, "__call__", logged)


def test_mlp_sgd_momentum_clipping_and_scheduler(max_calls, monkeypatch):
    pointers = PointerLog(monkeypatch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )

    def sgd(params):
        # A tensor learning rate lets the scheduler change it without a
        # recompile (a Python float would be a constant of the graph).
        return torch.optim.SGD(
            params, lr=torch.tensor(0.05), momentum=0.9, weight_decay=1e-3
        )

    got, eager = train_both(
        model,
        sgd,
        lambda m, b: F.mse_loss(m(b[0]), b[1]),
        _regression_batches(12, 4),
        clip=1.0,
        make_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 2, 0.5),
    )
    assert_same_training(got, eager)
    assert got.lrs == pytest.approx([0.05, 0.05, 0.025, 0.025, 0.0125])
    assert max_calls.of("forward") == STEPS
    assert max_calls.of("backward") == STEPS
    # Clipping and the SGD step ran on MAX at every step, and the scheduler's
    # changes of the learning rate compiled nothing new.
    assert max_calls.of("inference") >= STEPS
    # The first step creates the momentum buffers (its own optimizer graph);
    # from the second step on, every step reuses the same graphs.
    per_step = len(max_calls.names) // STEPS
    steps = [max_calls.names[k * per_step : (k + 1) * per_step] for k in range(STEPS)]
    assert all(step == steps[1] for step in steps[2:])
    # Activations saved for the backward pass reach the backward MAX graph as
    # the very buffers the forward graph produced: contiguous, so DLPack hands
    # them over without a copy.
    saved = [t for t in pointers.backward_in if t.data_ptr() in pointers.forward_out]
    assert saved
    assert all(t.is_contiguous() for t in saved)


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            # No conv bias before batch norm: its gradient is zero up to
            # rounding, which Adam would amplify into noise-driven updates.
            torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, bias=False),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
        )
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def test_cnn_batch_norm_pooling_adam(max_calls):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    batches = [
        (torch.randn(4, 3, 12, 12, generator=g), torch.randint(0, 5, (4,), generator=g))
        for _ in range(STEPS)
    ]
    got, eager = train_both(
        SmallCNN(),
        lambda params: torch.optim.Adam(params, lr=1e-3),
        lambda m, b: F.cross_entropy(m(b[0]), b[1]),
        batches,
    )
    assert_same_training(got, eager)
    assert max_calls.of("forward") == STEPS
    assert max_calls.of("backward") == STEPS


def test_channels_last_cnn_trains_in_its_memory_order(
    max_calls, built_graphs, monkeypatch
):
    # model.to(memory_format=torch.channels_last): its filters, their
    # gradients and AdamW's moments are read and written where they lie, at
    # every graph of the step (no copy to torch's default layout and back),
    # and the saved activations cross from forward to backward channels-last.
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    batches = [
        (
            torch.randn(4, 3, 12, 12, generator=g).contiguous(
                memory_format=torch.channels_last
            ),
            torch.randint(0, 5, (4,), generator=g),
        )
        for _ in range(STEPS)
    ]
    moved, written_as_taken = [], set()
    original = CompiledGraph.__call__

    def watched(graph: CompiledGraph, args: list) -> list:
        if graph._channels_last & set(graph._mutated):
            written_as_taken.add(graph.name)  # the optimizer's update
        for index in graph._channels_last:
            laid = args[index].permute(0, 2, 3, 1)
            if not laid.is_contiguous():
                moved.append((graph.name, index))
        return original(graph, args)

    monkeypatch.setattr(CompiledGraph, "__call__", watched)
    got, eager = train_both(
        SmallCNN().to(memory_format=torch.channels_last),
        lambda params: torch.optim.AdamW(params, lr=1e-3),
        lambda m, b: F.cross_entropy(m(b[0]), b[1]),
        batches,
    )
    assert_same_training(got, eager)
    assert not moved, moved
    assert written_as_taken, "the update staged its channels-last parameters"
    for p, q in zip(got.model.parameters(), eager.model.parameters(), strict=True):
        assert p.grad.stride() == q.grad.stride()
    # The filters' gradients computed in their own memory order (the
    # backward returns them channels-last, which autograd keeps).
    (backward,) = [
        str(built.graph)
        for gm, built in built_graphs
        if any(
            n.target is torch.ops.aten.convolution_backward.default
            for n in gm.graph.nodes
        )
    ]
    assert backward.count('symbol = "torch_max_backend_pixel_windows"') == 2
    assert max_calls.of("forward") == STEPS
    assert max_calls.of("backward") == STEPS


def _next_token_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    # The loss from the logits rather than ``labels=``: transformers' loss
    # helper logs a warning that Dynamo breaks the graph on.
    logits = model(ids, use_cache=False).logits
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def _train_next_token(
    model: torch.nn.Module, make_optimizer, seed: int
) -> tuple[object, object]:
    """Eager and compiled runs of STEPS next-token steps on random batches."""
    g = torch.Generator().manual_seed(seed)
    batches = [torch.randint(0, 64, (2, 16), generator=g) for _ in range(STEPS)]
    return train_both(model.train(), make_optimizer, _next_token_loss, batches)


def test_gpt2_adamw(max_calls):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        n_positions=16,
        vocab_size=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    got, eager = _train_next_token(
        transformers.GPT2LMHeadModel(config),
        lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01),
        seed=3,
    )
    assert_same_training(got, eager)
    names = dict(got.model.named_parameters())
    # Embedding and layer norm gradients came out of the MAX backward graph.
    for name in ("transformer.wte.weight", "transformer.ln_f.weight"):
        assert names[name].grad is not None and names[name].grad.abs().sum() > 0
    assert max_calls.of("forward") == STEPS
    assert max_calls.of("backward") == STEPS


def test_grouped_query_llama_trains_on_max_alone(max_calls):
    # 4 query heads over 2 key/value heads, trained on batch 2, 16 tokens:
    # the configuration whose attention backward used to fail in MatmulOp.
    torch.manual_seed(0)
    model = tiny_llama(vocab_size=64, max_position_embeddings=16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # nothing ran in PyTorch
        got, eager = _train_next_token(
            model, lambda params: torch.optim.SGD(params, lr=0.05), seed=5
        )
    assert_same_training(got, eager)
    # One forward and one backward graph a step: attention is not split out.
    assert max_calls.of("forward") == STEPS
    assert max_calls.of("backward") == STEPS
