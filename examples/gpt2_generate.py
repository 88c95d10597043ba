"""Greedy text generation with a small GPT-2, eagerly and with max_backend.

The model is transformers' GPT2LMHeadModel from a small GPT2Config with random
weights (--seed), or --weights FILE (a local safetensors state dict). Its
output head is not tied to the token embeddings unless --tied is given: small
random tied weights make every step repeat the last token. Without
a KV cache, each step feeds the whole sequence so far and picks the most
likely next token. The sequence dimension is marked dynamic, so one MAX graph
serves every length: the script checks that the generation compiled a single
MAX graph, that eager PyTorch and max_backend generate the same tokens, and
times one generated token with each.

    python examples/gpt2_generate.py [--layers 2] [--new-tokens 8] [--prompt-len 8]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch
from common import (
    load_weights,
    median_ms,
    parser,
    print_timings,
    verdict,
)
from transformers import GPT2Config, GPT2LMHeadModel

from torch_max_backend import compile_stats, max_backend, reset_compile_stats

Step = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def generate(
    step: Step, prompt: torch.Tensor, new_tokens: int
) -> tuple[torch.Tensor, list[torch.Tensor], list[float]]:
    """The prompt followed by ``new_tokens`` greedy tokens, each step's
    last-position logits, and each step's seconds."""
    ids = prompt
    logits, seconds = [], []
    for _ in range(new_tokens):
        # A new tensor each step: mark its length dynamic so that Dynamo
        # traces one graph for every length instead of one per length.
        torch._dynamo.mark_dynamic(ids, 1)
        start = time.perf_counter()
        last, next_ids = step(ids)
        seconds.append(time.perf_counter() - start)
        logits.append(last)
        ids = torch.cat([ids, next_ids[:, None]], dim=1)
    return ids, logits, seconds


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--embd", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--positions", type=int, default=128, help="longest sequence")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument(
        "--tied",
        action="store_true",
        help="tie the output head to the token embeddings, as GPT-2 does",
    )
    args = p.parse_args(argv)
    if args.prompt_len < 2:
        # Dynamo specializes sizes 0 and 1: a length-1 prompt cannot be dynamic.
        p.error("--prompt-len must be at least 2")
    if args.new_tokens < 1:
        p.error("--new-tokens must be at least 1")
    if args.prompt_len + args.new_tokens > args.positions:
        p.error("--prompt-len plus --new-tokens exceeds --positions")

    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    config = GPT2Config(
        n_layer=args.layers,
        n_embd=args.embd,
        n_head=args.heads,
        vocab_size=args.vocab,
        n_positions=args.positions,
        bos_token_id=args.vocab - 1,
        eos_token_id=args.vocab - 1,
        tie_word_embeddings=args.tied,
    )
    model = GPT2LMHeadModel(config).eval()
    load_weights(model, args.weights)
    model = model.to(device)
    prompt = torch.randint(
        0, config.vocab_size, (args.batch, args.prompt_len), device=device
    )
    params = sum(p.numel() for p in model.parameters())
    print(
        f"GPT-2: {config.n_layer} layers, {config.n_embd} wide, {config.n_head} "
        f"heads, vocab {config.vocab_size}, {'tied' if args.tied else 'untied'} "
        f"output head; {params / 1e6:.2f}M parameters, "
        f"device {device}"
    )
    print(
        f"prompt {tuple(prompt.shape)}, {args.new_tokens} new tokens, greedy, "
        "no KV cache (the whole sequence at each step)"
    )

    def step(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        last = model(input_ids=ids, use_cache=False).logits[:, -1]
        return last, last.argmax(-1)

    compiled = torch.compile(step, backend=max_backend, fullgraph=True)
    with torch.no_grad():
        eager_ids, eager_logits, _ = generate(step, prompt, args.new_tokens)
        reset_compile_stats()
        max_ids, max_logits, max_seconds = generate(compiled, prompt, args.new_tokens)
        stats = compile_stats()
        eager_ms = median_ms(
            lambda: generate(step, prompt, args.new_tokens), args.runs, device
        )
        max_ms = median_ms(
            lambda: generate(compiled, prompt, args.new_tokens), args.runs, device
        )
        # Sequences of every length were seen by now: still one graph.
        after = compile_stats()

    start = args.prompt_len
    print(f"eager tokens:       {eager_ids[:, start:].tolist()}")
    print(f"max_backend tokens: {max_ids[:, start:].tolist()}")
    same = torch.equal(eager_ids, max_ids)
    diff = max(
        (e - m).abs().max().item()
        for e, m in zip(eager_logits, max_logits, strict=True)
    )
    print(f"next-token logits: max abs diff {diff:.2e} over all steps")

    lengths = f"lengths {args.prompt_len}..{args.prompt_len + args.new_tokens - 1}"
    # A graph this process already compiled counts as a cache hit, not a compile.
    # A graph compiled by an earlier run is a warm start: not built again.
    graphs = after.graphs_built + after.warm_starts
    one_graph = (
        graphs == stats.graphs_built + stats.warm_starts == 1
        and after.max_compiles + after.cache_hits == 1
    )
    print(
        f"{args.new_tokens} steps ({lengths}): {graphs} MAX graph(s) "
        f"({after.warm_starts} from a warm start), {after.max_compiles} compiled"
        + ("" if one_graph else " -- Dynamo recompiled for a new length")
    )
    if args.new_tokens > 1:
        later_ms = max(max_seconds[1:]) * 1e3
        print(f"first generation: later steps took at most {later_ms:.2f} ms each")
    print("one call per generated token:")
    print_timings(eager_ms / args.new_tokens, max_ms / args.new_tokens, max_seconds[0])
    code = verdict(same, "greedy tokens")
    if not one_graph:
        print("error: the generation needed more than one MAX graph")
        return code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
