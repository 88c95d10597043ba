"""Compile a small GPT-2 with torch-max-backend, check it against eager, time both.

Runs offline: the model is built from a transformers config with random
weights (pass --weights FILE to load a state dict saved with torch.save).

    python examples/gpt2.py [--layers 2] [--seq 32] [--batch 2]
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from torch_max_backend import max_backend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--embd", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--weights", help="a torch.save'd GPT2LMHeadModel state dict")
    args = parser.parse_args()

    torch.manual_seed(0)
    config = GPT2Config(n_layer=args.layers, n_embd=args.embd, n_head=args.heads)
    model = GPT2LMHeadModel(config).eval()
    if args.weights:
        model.load_state_dict(torch.load(args.weights, map_location="cpu"))
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq))

    def logits(input_ids: torch.Tensor) -> torch.Tensor:
        return model(input_ids, use_cache=False).logits

    compiled = torch.compile(logits, backend=max_backend, fullgraph=True)
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(ids)
        compile_s = time.perf_counter() - start
        expected = logits(ids)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)

        def mean_ms(fn: object) -> float:
            fn(ids)
            start = time.perf_counter()
            for _ in range(args.runs):
                fn(ids)
            return (time.perf_counter() - start) / args.runs * 1e3

        eager_ms, max_ms = mean_ms(logits), mean_ms(compiled)

    params = sum(p.numel() for p in model.parameters())
    print(
        f"GPT-2: {args.layers} layers, {args.embd} wide, {params / 1e6:.1f}M parameters"
    )
    print(f"input ids {tuple(ids.shape)} -> logits {tuple(out.shape)}")
    print(f"matches eager PyTorch: max abs diff {(out - expected).abs().max():.2e}")
    print(f"first call (compile + run): {compile_s:.1f} s")
    print(f"eager PyTorch: {eager_ms:.2f} ms/call   MAX: {max_ms:.2f} ms/call")
    next_ids = out[:, -1].argmax(-1)
    print(f"greedy next tokens: {next_ids.tolist()}")


if __name__ == "__main__":
    main()
