"""Training over batches whose sequence length varies, as fine-tuning meets it.

    python -m benchmarks.varying_lengths [--lengths 128,96,112,80] [--rounds 12]

Fine-tuning pads each batch to its own longest sequence (transformers'
``DataCollatorWithPadding``), so a compiled step meets a new length at
almost every batch: Dynamo traces a second length again with the sequence
length symbolic, and the backend builds and compiles graphs of symbolic
size. This measures what a user then sees, with the step that
transformers' ``Trainer`` takes: GPT-2 small's first 6 layers (the suite's
``gpt2-train``, dropout off), batch 1, next-token cross-entropy, gradient
norms clipped at 1.0, AdamW and a linear learning-rate schedule, the whole
step compiled (zero_grad, forward, loss, backward, clipping, update,
schedule).

Each backend (eager, inductor, max) runs in ``--repeat`` fresh processes,
the backends taking turns, over the user's compile caches (``--caches
cold``: empty ones, this machine's product timings carried). A process
steps through the lengths ``--rounds`` times and reports: the first
round's seconds per length (compiles included: the second length is
where Dynamo retraces with a symbolic length; ``--symbolic dynamic``
compiles with ``dynamic=True`` and ``--symbolic mark`` marks the length
dynamic, either tracing the first length symbolic already), for max the
seconds until every graph was on MAX (the backward and the update may
compile in the background while their first calls run in PyTorch), then
the median step per length over the later rounds. Every step's loss is
compared with eager's, step for step, from the same weights and batches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tabulate import tabulate

from benchmarks.cases import gpt2_for_training
from benchmarks.child import cache_env, child_json_or_exit, turn_order
from benchmarks.machine import cpu_line, machine, product_timings_carried

BACKENDS = ("eager", "inductor", "max")
_TIMEOUT_S = 3600.0


def trainer_step(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """One step as transformers' Trainer takes it, over token ids ``ids``
    (the targets are the ids shifted by one): the loss, detached."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: max(0.0, 1.0 - i / 10_000)
    )

    def step(ids: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        logits = model(ids)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids.roll(-1, dims=1).reshape(-1)
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        return loss.detach()

    return step


def run_rounds(
    step: Callable[[torch.Tensor], torch.Tensor],
    batches: dict[int, torch.Tensor],
    rounds: int,
    after_first_round: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Step through ``batches`` (by length) ``rounds`` times: the first
    round's seconds by length, the seconds until ``after_first_round``
    (waiting for background compiles) returned, the median of the later
    steps by length, and every loss."""
    seconds: dict[int, list[float]] = {n: [] for n in batches}
    losses: list[float] = []
    start = time.perf_counter()
    for index in range(rounds):
        for length, ids in batches.items():
            begin = time.perf_counter()
            losses.append(float(step(ids)))
            seconds[length].append(time.perf_counter() - begin)
        if index == 0:
            after_first_round()
            full_speed_s = time.perf_counter() - start
    return {
        "first_round_s": {n: s[0] for n, s in seconds.items()},
        "full_speed_s": full_speed_s,
        "median_ms": {
            n: statistics.median(s[1:]) * 1e3 for n, s in seconds.items() if s[1:]
        },
        "losses": losses,
    }


def _child(
    backend: str, lengths: list[int], rounds: int, layers: int, symbolic: str
) -> None:
    """One backend in this (fresh) process; prints its figures as JSON."""
    torch.manual_seed(0)
    model, _ = gpt2_for_training(layers)
    model.train()
    vocab = model.model.config.vocab_size
    step = trainer_step(model)
    wait: Callable[[], None] = lambda: None  # noqa: E731
    # None: Dynamo's default (static first, symbolic from the second length).
    dynamic = True if symbolic == "dynamic" else None
    if backend == "inductor":
        step = torch.compile(step, dynamic=dynamic)
    elif backend == "max":
        from torch_max_backend import wait_compiled

        step = torch.compile(step, backend="max", dynamic=dynamic)
        wait = wait_compiled
    generator = torch.Generator().manual_seed(1)
    batches = {n: torch.randint(0, vocab, (1, n), generator=generator) for n in lengths}
    if symbolic == "mark":
        for ids in batches.values():
            torch._dynamo.mark_dynamic(ids, 1)  # the length alone, from the first
    figures = run_rounds(step, batches, rounds, wait)
    if backend == "max":
        from torch_max_backend import compile_stats

        stats = compile_stats()
        figures["graphs_built"], figures["pending"] = stats.graphs_built, stats.pending
    print(json.dumps({"backend": backend, **figures}), flush=True)


def _measure(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = ["-m", "benchmarks.varying_lengths", "--child", backend]
    argv += ["--lengths", args.lengths, "--rounds", str(args.rounds)]
    argv += ["--layers", str(args.layers), "--symbolic", args.symbolic]
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        caches = Path(tmp) if args.caches == "cold" and backend != "eager" else None
        with product_timings_carried(caches):
            env = cache_env(caches)
            return child_json_or_exit(argv, backend, env=env, timeout=_TIMEOUT_S)


def summarize(runs: dict[str, list[dict[str, Any]]]) -> list[list[str]]:
    """One table row per backend: medians over its processes."""
    lengths = list(runs["eager"][0]["median_ms"])

    def medians(processes: list[dict[str, Any]]) -> dict[str, float]:
        return {
            n: statistics.median(r["median_ms"][n] for r in processes) for n in lengths
        }

    eager = medians(runs["eager"])
    inductor = medians(runs["inductor"]) if "inductor" in runs else None
    rows = []
    for backend, processes in runs.items():
        ms = medians(processes)
        first = {
            n: statistics.median(r["first_round_s"][n] for r in processes)
            for n in lengths
        }
        loss_diff = max(
            abs(a - b)
            for r, e in zip(processes, runs["eager"], strict=False)
            for a, b in zip(r["losses"], e["losses"], strict=True)
        )
        row = [
            backend,
            " / ".join(f"{first[n]:.1f}" for n in lengths),
            f"{statistics.median(r['full_speed_s'] for r in processes):.1f}",
            " / ".join(f"{ms[n]:.0f}" for n in lengths),
            " / ".join(f"{eager[n] / ms[n]:.2f}" for n in lengths),
        ]
        if inductor:
            row.append(" / ".join(f"{inductor[n] / ms[n]:.2f}" for n in lengths))
        rows.append([*row, f"{loss_diff:.1e}"])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="128,96,112,80")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--caches", choices=("user", "cold"), default="user")
    parser.add_argument(
        "--symbolic",
        choices=("default", "dynamic", "mark"),
        default="default",
        help="default: Dynamo's (static first, the length symbolic from the "
        "second); dynamic: torch.compile(dynamic=True); mark: the length "
        "marked dynamic (torch._dynamo.mark_dynamic) from the first batch",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", choices=BACKENDS)
    args = parser.parse_args(argv)
    try:
        lengths = [int(n) for n in args.lengths.split(",")]
    except ValueError:
        parser.error(f"--lengths: comma-separated integers, not {args.lengths!r}")
    if len(set(lengths)) < 2 or min(lengths) < 2:
        parser.error("--lengths: two or more different lengths of 2 tokens or more")
    if args.rounds < 2:
        parser.error("--rounds: 2 or more (the first round compiles)")
    if args.child:
        _child(args.child, lengths, args.rounds, args.layers, args.symbolic)
        return
    backends = [b for b in args.backends.split(",") if b]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or "eager" not in backends:
        parser.error(f"--backends: eager and any of {', '.join(BACKENDS[1:])}")
    print(cpu_line(machine()), file=sys.stderr)
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    for index in range(args.repeat):
        for backend in turn_order(backends, index):
            runs[backend].append(_measure(backend, args))
    headers = [
        "backend",
        f"first round s ({args.lengths})",
        "full speed after s",
        "then median ms",
        "x eager",
        *(["x Inductor"] if "inductor" in runs else []),
        "max |loss diff|",
    ]
    print(tabulate(summarize(runs), headers=headers))
    if args.json:
        settings = {"symbolic": args.symbolic, "caches": args.caches}
        args.json.write_text(
            json.dumps({"machine": machine(), **settings, "runs": runs})
        )


if __name__ == "__main__":
    main()
