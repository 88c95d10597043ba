"""Compile a small GPT-2 with torch-max-backend, check it against eager, time both.

Runs offline: the model is built from a transformers config with random
weights (--weights FILE loads a local safetensors file of GPT2LMHeadModel's
state dict instead).

    python examples/gpt2.py [--layers 2] [--seq 32] [--batch 2] [--device cuda]
"""

from __future__ import annotations

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
from transformers import GPT2Config, GPT2LMHeadModel

from torch_max_backend import max_backend


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--embd", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=32)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    config = GPT2Config(n_layer=args.layers, n_embd=args.embd, n_head=args.heads)
    model = GPT2LMHeadModel(config)
    load_weights(model, args.weights)
    model = model.eval().to(device)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=device)

    def logits(input_ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids, use_cache=False).logits

    compiled = torch.compile(logits, backend=max_backend, fullgraph=True)
    with torch.no_grad():
        out, first_call_s = timed_first_call(lambda: compiled(ids))
        expected = logits(ids)
        eager_ms = median_ms(lambda: logits(ids), args.runs, device)
        max_ms = median_ms(lambda: compiled(ids), args.runs, device)

    params = sum(p.numel() for p in model.parameters())
    print(
        f"GPT-2: {args.layers} layers, {args.embd} wide, {params / 1e6:.1f}M parameters"
    )
    print(f"input ids {tuple(ids.shape)} -> logits {tuple(out.shape)}")
    diff = (out - expected).abs().max().item()
    print(f"max abs difference from eager PyTorch: {diff:.2e}")
    print(f"greedy next tokens: {out[:, -1].argmax(-1).tolist()}")
    print_timings(eager_ms, max_ms, first_call_s)
    close = torch.allclose(out, expected, rtol=1e-4, atol=1e-4)
    same_tokens = torch.equal(out[:, -1].argmax(-1), expected[:, -1].argmax(-1))
    return verdict(close and same_tokens, "logits and next tokens")


if __name__ == "__main__":
    sys.exit(main())
