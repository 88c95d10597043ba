"""The benchmark model zoo: small factories returning a model and its inputs.

Every model is built from a fixed seed with random weights, so that separate
processes build the very same model (compile benchmarks run each measurement
in a fresh process).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from examples.architectures import ResNet

Case = tuple[nn.Module, tuple[torch.Tensor, ...]]


def mlp(batch: int = 64, hidden: int = 1024) -> Case:
    model = nn.Sequential(
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, 10),
    )
    return model, (torch.randn(batch, hidden),)


def resnet18(batch: int = 1, size: int = 224) -> Case:
    return ResNet("resnet18"), (torch.randn(batch, 3, size, size),)


class _LogitsOnly(nn.Module):
    """A transformers causal LM returning its logits tensor alone."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, use_cache=False).logits


class _ImageLogits(nn.Module):
    """A transformers image classifier returning its logits tensor alone."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def mobilenet_v2(
    batch: int = 2, size: int = 64, depth_multiplier: float = 0.35
) -> Case:
    """A MobileNetV2, small by default (depth multiplier 0.35, 10 classes):
    depthwise convolutions, ReLU6 and batch norm, the training step issue 59
    times; with a multiplier of 1.0, 1000 classes (the ImageNet model)."""
    import transformers

    config = transformers.MobileNetV2Config(
        depth_multiplier=depth_multiplier,
        image_size=size,
        num_labels=1000 if depth_multiplier == 1.0 else 10,
    )
    model = _ImageLogits(transformers.MobileNetV2ForImageClassification(config))
    return model, (torch.randn(batch, 3, size, size),)


def convnext(batch: int = 1, size: int = 224) -> Case:
    """ConvNeXt-tiny: 7x7 depthwise convolutions, layer norms and GELUs."""
    import transformers

    model = transformers.ConvNextForImageClassification(transformers.ConvNextConfig())
    return _ImageLogits(model), (torch.randn(batch, 3, size, size),)


def gpt2(layers: int = 12, batch: int = 1, seq: int = 128) -> Case:
    import transformers

    config = transformers.GPT2Config(n_layer=layers)
    model = _LogitsOnly(transformers.GPT2LMHeadModel(config))
    return model, (torch.randint(0, config.vocab_size, (batch, seq)),)


def gpt2_2layer() -> Case:
    return gpt2(layers=2, batch=1, seq=128)


class _HiddenStates(nn.Module):
    """A transformers encoder returning its last hidden states alone."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids).last_hidden_state


def bert(layers: int = 12, batch: int = 1, seq: int = 128) -> Case:
    """BERT-base (12 layers, 768 wide) unless told otherwise."""
    import transformers

    config = transformers.BertConfig(num_hidden_layers=layers)
    model = _HiddenStates(transformers.BertModel(config, add_pooling_layer=False))
    return model, (torch.randint(0, config.vocab_size, (batch, seq)),)


def gemma_config(layers: int = 6, vocab: int = 32768) -> Any:
    """A Gemma-3-style decoder at the width of Gemma 3 270M, with fewer layers
    and a smaller vocabulary: RMSNorm, rotary embeddings, grouped-query
    attention (4 query heads share 1 key/value head), GeGLU, and Gemma 3's
    interleaving of sliding-window and global attention layers."""
    import transformers

    return transformers.Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=640,
        intermediate_size=2048,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        sliding_window=64,
        max_position_embeddings=2048,
        use_cache=False,
    )


def gemma(layers: int = 6, batch: int = 1, seq: int = 128) -> Case:
    import transformers

    config = gemma_config(layers)
    model = _LogitsOnly(transformers.Gemma3ForCausalLM(config))
    return model, (torch.randint(0, config.vocab_size, (batch, seq)),)


ZOO: dict[str, Callable[[], Case]] = {
    "mlp": mlp,
    "resnet18": resnet18,
    "gpt2-2layer": gpt2_2layer,
    "gpt2": gpt2,
    "bert": bert,
    "gemma": gemma,
    "mobilenetv2": mobilenet_v2,
}


def build(name: str) -> Case:
    """The model ``name`` in eval mode, its weights drawn from seed 0."""
    if name not in ZOO:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(ZOO)}")
    torch.manual_seed(0)
    model, inputs = ZOO[name]()
    return model.eval(), inputs
