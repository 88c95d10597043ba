"""Compile a tiny Gemma-3-style decoder with max_backend and check it against eager.

The model is transformers' Gemma3ForCausalLM built from a small
Gemma3TextConfig with random weights (--seed), or --weights FILE (a local
safetensors state dict). It has what makes Gemma 3 a Gemma 3: RMSNorm (also
on queries and keys), rotary embeddings with a different base for local and
global layers, grouped-query attention (fewer key/value heads than query
heads), a GeGLU feed-forward, and sliding-window layers interleaved with
full-attention ones. Eager PyTorch and max_backend run the same token ids;
the script compares the logits and the greedy next tokens, and times both.

    python examples/gemma3_decoder.py [--layers 2] [--batch 2] [--seq 16]
"""

from __future__ import annotations

import argparse
import sys

import torch
from common import (
    load_weights,
    median_ms,
    parser,
    print_timings,
    timed_first_call,
    verdict,
)
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from torch_max_backend import max_backend


def build_config(args: argparse.Namespace) -> Gemma3TextConfig:
    # Gemma 3 makes every sixth layer global; --global-every 2 gives a 2-layer
    # model one layer of each kind.
    layer_types = [
        "full_attention" if (i + 1) % args.global_every == 0 else "sliding_attention"
        for i in range(args.layers)
    ]
    return Gemma3TextConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        query_pre_attn_scalar=args.head_dim,
        sliding_window=args.window,
        layer_types=layer_types,
        max_position_embeddings=max(256, args.seq),
        use_cache=False,
    )


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=256)
    p.add_argument("--heads", type=int, default=4, help="query heads")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads (GQA)")
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--window", type=int, default=8, help="sliding window (tokens)")
    p.add_argument(
        "--global-every",
        type=int,
        default=2,
        help="every Nth layer attends globally, the others use the sliding "
        "window (Gemma 3 uses 6)",
    )
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--rtol", type=float, default=1e-4)
    args = p.parse_args(argv)
    if args.heads % args.kv_heads:
        p.error("--heads must be a multiple of --kv-heads")
    if args.global_every < 1:
        p.error("--global-every must be at least 1")

    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    config = build_config(args)
    model = Gemma3ForCausalLM(config).eval()
    load_weights(model, args.weights)
    model = model.to(device)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=device)

    params = sum(p.numel() for p in model.parameters())
    kinds = ", ".join(
        f"{config.layer_types.count(k)} {k.split('_')[0]}"
        for k in ("sliding_attention", "full_attention")
    )
    print(
        f"Gemma 3 decoder: {config.num_hidden_layers} layers ({kinds}; window "
        f"{config.sliding_window}), hidden {config.hidden_size}, "
        f"{config.num_attention_heads} query / {config.num_key_value_heads} "
        f"key-value heads of {config.head_dim}, GeGLU {config.intermediate_size}, "
        f"vocab {config.vocab_size}; {params / 1e6:.2f}M parameters, "
        f"attention {config._attn_implementation}, device {device}"
    )
    print(f"input ids {tuple(ids.shape)}")

    def logits(input_ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids=input_ids, use_cache=False).logits

    compiled = torch.compile(logits, backend=max_backend, fullgraph=True)
    with torch.no_grad():
        expected = logits(ids)
        out, first_call_s = timed_first_call(lambda: compiled(ids))
        eager_ms = median_ms(lambda: logits(ids), args.runs, device)
        max_ms = median_ms(lambda: compiled(ids), args.runs, device)

    diff = (out - expected).abs().max().item()
    close = torch.allclose(out, expected, rtol=args.rtol, atol=args.atol)
    print(
        f"logits {tuple(out.shape)}: max abs diff {diff:.2e} "
        f"({'within' if close else 'OUTSIDE'} rtol {args.rtol:g}, atol {args.atol:g})"
    )
    eager_next = expected[:, -1].argmax(-1)
    max_next = out[:, -1].argmax(-1)
    same_next = torch.equal(eager_next, max_next)
    print(f"greedy next tokens: eager {eager_next.tolist()}, max {max_next.tolist()}")
    print_timings(eager_ms, max_ms, first_call_s)
    return verdict(close and same_next, "Gemma 3 logits and greedy next tokens")


if __name__ == "__main__":
    sys.exit(main())
