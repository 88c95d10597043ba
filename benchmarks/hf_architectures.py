"""Small Hugging Face architectures for the model check, random weights, no download.

Each entry builds a 2-layer, 64-wide variant of one architecture from its
config (every dropout, drop-path, layer-drop and SpecAugment probability set to
zero, so that training-mode runs are deterministic) and the inputs of one
training batch, labels included where the model computes its own loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

VOCAB = 1000
BATCH = 2
TOKENS = 16
IMAGE = 32


@dataclass(frozen=True)
class Architecture:
    name: str
    kind: str
    # The transformers model type (AutoConfig.for_model) and the Auto class.
    model_type: str
    auto_class: str
    config: dict[str, Any]
    inputs: Callable[[Any], dict[str, torch.Tensor]]


def _zero_random_drops(config: Any) -> None:
    """Set every probability that makes a training step random to zero."""
    for name, value in list(vars(config).items()):
        randomizes = any(
            part in name
            for part in ("dropout", "pdrop", "drop_path", "layerdrop", "drop_rate")
        ) or name in ("mask_time_prob", "mask_feature_prob")
        if randomizes and isinstance(value, float) and not isinstance(value, bool):
            setattr(config, name, 0.0)
    if hasattr(config, "apply_spec_augment"):
        config.apply_spec_augment = False


def build(arch: Architecture, seed: int = 0) -> tuple[nn.Module, dict[str, Any]]:
    """The model (train mode, random weights from ``seed``) and its inputs."""
    import transformers

    config = transformers.AutoConfig.for_model(arch.model_type, **arch.config)
    _zero_random_drops(config)
    torch.manual_seed(seed)
    model = getattr(transformers, arch.auto_class).from_config(config)
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    generator = torch.Generator().manual_seed(seed + 1)
    return model.train(), arch.inputs(generator)


def _ids(generator: torch.Generator, length: int = TOKENS) -> torch.Tensor:
    return torch.randint(1, VOCAB, (BATCH, length), generator=generator)


def _causal_lm(generator: torch.Generator) -> dict[str, torch.Tensor]:
    ids = _ids(generator)
    return {"input_ids": ids, "labels": ids, "use_cache": False}


def _classify_text(generator: torch.Generator) -> dict[str, torch.Tensor]:
    labels = torch.randint(0, 3, (BATCH,), generator=generator)
    return {"input_ids": _ids(generator), "labels": labels}


def _seq2seq(generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "input_ids": _ids(generator),
        "labels": _ids(generator, TOKENS // 2),
        "use_cache": False,
    }


def _pixels(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(BATCH, 3, IMAGE, IMAGE, generator=generator)


def _classify_image(generator: torch.Generator) -> dict[str, torch.Tensor]:
    labels = torch.randint(0, 3, (BATCH,), generator=generator)
    return {"pixel_values": _pixels(generator), "labels": labels}


def _segment(generator: torch.Generator) -> dict[str, torch.Tensor]:
    labels = torch.randint(0, 3, (BATCH, IMAGE, IMAGE), generator=generator)
    return {"pixel_values": _pixels(generator), "labels": labels}


def _classify_audio(generator: torch.Generator) -> dict[str, torch.Tensor]:
    labels = torch.randint(0, 3, (BATCH,), generator=generator)
    return {
        "input_values": torch.randn(BATCH, 1600, generator=generator),
        "labels": labels,
    }


def _transcribe(generator: torch.Generator) -> dict[str, torch.Tensor]:
    features = torch.randn(BATCH, 16, 64, generator=generator)
    return {
        "input_features": features,
        "labels": _ids(generator, 8),
        "use_cache": False,
    }


_WIDTH = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
_DECODER = {**_WIDTH, "intermediate_size": 128, "vocab_size": VOCAB, "pad_token_id": 0}
_ENCODER = {**_DECODER, "num_labels": 3}
_SEQ2SEQ = {
    "vocab_size": VOCAB,
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "pad_token_id": 0,
    "decoder_start_token_id": 0,
}
_IMAGE = {"num_labels": 3, "image_size": IMAGE}


def _lm(name: str, model_type: str, **config: Any) -> Architecture:
    return Architecture(
        name, "decoder LM", model_type, "AutoModelForCausalLM", config, _causal_lm
    )


ARCHITECTURES: tuple[Architecture, ...] = (
    _lm(
        "gpt2",
        "gpt2",
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=VOCAB,
        bos_token_id=1,
        eos_token_id=1,
    ),
    _lm("llama (GQA)", "llama", **_DECODER, num_key_value_heads=2),
    _lm("qwen2 (GQA)", "qwen2", **_DECODER, num_key_value_heads=2),
    _lm("mistral (GQA)", "mistral", **_DECODER, num_key_value_heads=2),
    _lm("gemma (MQA)", "gemma", **_DECODER, num_key_value_heads=1, head_dim=16),
    _lm(
        "phi3",
        "phi3",
        **_DECODER,
        num_key_value_heads=4,
        bos_token_id=1,
        eos_token_id=1,
    ),
    _lm("opt", "opt", **_DECODER, ffn_dim=128, word_embed_proj_dim=64),
    _lm("gpt-neox", "gpt_neox", **_DECODER),
    _lm(
        "mixtral (MoE)",
        "mixtral",
        **_DECODER,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
    ),
    _lm(
        "qwen2-moe (MoE)",
        "qwen2_moe",
        **_DECODER,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=64,
    ),
    _lm("mamba (state space)", "mamba", **_WIDTH, state_size=8, vocab_size=VOCAB),
    Architecture(
        "bert",
        "encoder",
        "bert",
        "AutoModelForSequenceClassification",
        _ENCODER,
        _classify_text,
    ),
    Architecture(
        "distilbert",
        "encoder",
        "distilbert",
        "AutoModelForSequenceClassification",
        {"vocab_size": VOCAB, "n_layers": 2, "dim": 64, "n_heads": 4, "num_labels": 3},
        _classify_text,
    ),
    Architecture(
        "albert",
        "encoder",
        "albert",
        "AutoModelForSequenceClassification",
        {**_ENCODER, "embedding_size": 32},
        _classify_text,
    ),
    Architecture(
        "deberta-v2",
        "encoder",
        "deberta-v2",
        "AutoModelForSequenceClassification",
        {**_ENCODER, "relative_attention": True, "position_buckets": 8},
        _classify_text,
    ),
    Architecture(
        "t5",
        "encoder-decoder",
        "t5",
        "AutoModelForSeq2SeqLM",
        {
            "vocab_size": VOCAB,
            "d_model": 64,
            "d_ff": 128,
            "d_kv": 16,
            "num_layers": 2,
            "num_heads": 4,
            "decoder_start_token_id": 0,
        },
        _seq2seq,
    ),
    Architecture(
        "bart", "encoder-decoder", "bart", "AutoModelForSeq2SeqLM", _SEQ2SEQ, _seq2seq
    ),
    Architecture(
        "whisper (speech)",
        "encoder-decoder",
        "whisper",
        "AutoModelForSpeechSeq2Seq",
        {**_SEQ2SEQ, "num_mel_bins": 16, "max_source_positions": 32},
        _transcribe,
    ),
    Architecture(
        "wav2vec2 (speech)",
        "speech",
        "wav2vec2",
        "AutoModelForAudioClassification",
        {
            **_ENCODER,
            "conv_dim": (16, 16),
            "conv_stride": (5, 4),
            "conv_kernel": (10, 8),
            "num_conv_pos_embeddings": 16,
            "num_conv_pos_embedding_groups": 4,
            "classifier_proj_size": 32,
        },
        _classify_audio,
    ),
    Architecture(
        "resnet (CNN)",
        "vision",
        "resnet",
        "AutoModelForImageClassification",
        {
            "num_labels": 3,
            "embedding_size": 16,
            "hidden_sizes": [16, 32],
            "depths": [1, 1],
            "layer_type": "basic",
        },
        _classify_image,
    ),
    Architecture(
        "convnext (CNN)",
        "vision",
        "convnext",
        "AutoModelForImageClassification",
        {"num_labels": 3, "hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2},
        _classify_image,
    ),
    Architecture(
        "vit",
        "vision",
        "vit",
        "AutoModelForImageClassification",
        {**_IMAGE, **_WIDTH, "intermediate_size": 128, "patch_size": 8},
        _classify_image,
    ),
    Architecture(
        "swin (windowed attention)",
        "vision",
        "swin",
        "AutoModelForImageClassification",
        {
            **_IMAGE,
            "patch_size": 4,
            "embed_dim": 16,
            "depths": [2],
            "num_heads": [2],
            "window_size": 4,
        },
        _classify_image,
    ),
    Architecture(
        "segformer (segmentation)",
        "segmentation",
        "segformer",
        "AutoModelForSemanticSegmentation",
        {
            "num_labels": 3,
            "num_encoder_blocks": 2,
            "depths": [1, 1],
            "sr_ratios": [2, 1],
            "hidden_sizes": [16, 32],
            "num_attention_heads": [1, 2],
            "patch_sizes": [7, 3],
            "strides": [4, 2],
            "decoder_hidden_size": 32,
        },
        _segment,
    ),
)


def by_name(name: str) -> Architecture:
    for arch in ARCHITECTURES:
        if arch.name == name or arch.name.split(" ")[0] == name:
            return arch
    known = ", ".join(a.name.split(" ")[0] for a in ARCHITECTURES)
    raise SystemExit(f"unknown architecture {name!r}; known: {known}")
