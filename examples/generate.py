"""Greedy generation with transformers' own generate(), eagerly and on MAX.

A small GPT-2 or llama-style model (grouped-query attention) from a
transformers config with random weights (--seed), or --weights FILE (a local
safetensors state dict), generates with a static KV cache; compiled, its
decode step runs with ``CompileConfig(backend="max")``, one MAX graph for
every position. The script checks that eager PyTorch and max_backend
generate the same tokens, that a second generate() compiles nothing, and
prints the decode speed of both in tokens per second.

    python examples/generate.py [--model llama|gpt2] [--layers 2] [--new-tokens 16]

On CPU the backend keeps PyTorch's OpenMP threads from spinning on the
cores MAX's kernels need between decode steps (``quiet_torch_threads``,
docs/usage.md, "Decoding with generate()"); this script leaves PyTorch's thread count as it is, so
that eager runs at its own best.
"""

from __future__ import annotations

import sys
import time

import torch
import transformers
from common import load_weights, median_ms, parser, verdict
from transformers.generation.configuration_utils import CompileConfig

from torch_max_backend import compile_stats, reset_compile_stats, wait_compiled


def build(args) -> torch.nn.Module:
    if args.model == "gpt2":
        config = transformers.GPT2Config(
            n_layer=args.layers,
            n_embd=args.width,
            n_head=args.heads,
            vocab_size=args.vocab,
            n_positions=args.prompt_len + args.new_tokens,
        )
        return transformers.GPT2LMHeadModel(config)
    config = transformers.LlamaConfig(
        hidden_size=args.width,
        intermediate_size=2 * args.width,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        vocab_size=args.vocab,
    )
    return transformers.LlamaForCausalLM(config)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--model", choices=["llama", "gpt2"], default="llama")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2, help="llama: key/value heads")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=16)
    args = p.parse_args(argv)
    if args.new_tokens < 2:
        p.error("--new-tokens must be at least 2 (the first comes from the prompt)")

    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    model = build(args).eval()
    load_weights(model, args.weights)
    model = model.to(device)
    prompt = torch.randint(0, args.vocab, (args.batch, args.prompt_len), device=device)
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{args.model}: {args.layers} layers, {args.width} wide, {args.heads} heads"
        + (f" ({args.kv_heads} key/value)" if args.model == "llama" else "")
        + f", vocab {args.vocab}; {params / 1e6:.2f}M parameters, device {device}"
    )
    print(
        f"prompt {tuple(prompt.shape)}, {args.new_tokens} new tokens, greedy, "
        "static KV cache"
    )

    config = CompileConfig(backend="max")  # mode="reduce-overhead" by default
    config._compile_all_devices = True  # transformers compiles on GPUs only else

    def generate(compile_config: CompileConfig | None) -> torch.Tensor:
        return model.generate(
            prompt,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
            cache_implementation="static",
            compile_config=compile_config,
        )

    with torch.no_grad():
        eager_ids = generate(None)
        reset_compile_stats()
        start = time.perf_counter()
        max_ids = generate(config)
        first_s = time.perf_counter() - start
        # With background compilation the decode step ran in PyTorch so far:
        # wait for its MAX graph so that what follows measures MAX.
        wait_compiled()
        first = compile_stats()
        reset_compile_stats()
        eager_ms = median_ms(lambda: generate(None), args.runs, device)
        max_ms = median_ms(lambda: generate(config), args.runs, device)
        again = compile_stats()

    start = args.prompt_len
    print(f"eager tokens:       {eager_ids[:, start:].tolist()}")
    print(f"max_backend tokens: {max_ids[:, start:].tolist()}")
    graphs = first.graphs_built + first.warm_starts
    print(
        f"first generate() with max_backend: {first_s:.1f} s ({graphs} MAX "
        f"graph(s) for the decode step, {first.warm_starts} from a warm start); "
        f"later generate() calls: {again.max_compiles} MAX compile(s)"
    )
    tokens = args.batch * args.new_tokens
    print(
        f"tokens/s (prefill included): eager {tokens / eager_ms * 1e3:.1f}, "
        f"max_backend {tokens / max_ms * 1e3:.1f} "
        f"({eager_ms / max_ms:.2f}x eager)"
    )
    same = torch.equal(eager_ids, max_ids)
    once = graphs == 1 and again.max_compiles == 0 and again.graphs_built == 0
    if not once:
        print("the decode step compiled more than once")
    return verdict(same and once, "greedy tokens and one decode graph")


if __name__ == "__main__":
    sys.exit(main())
