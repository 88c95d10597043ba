"""Decoding speed of language models: transformers' generate() with a static
KV cache, eagerly, with Inductor and with max_backend, in one run.

    python -m benchmarks.decode                    # GPT-2 small and a llama-style model
    python -m benchmarks.decode --models gpt2 --batches 1 --new-tokens 16
    python -m benchmarks.decode --docs             # also rewrite its docs section

Each model and backend is measured in a fresh process of its own (random
weights from one seed, so every backend sees the same model), with empty
compile caches unless ``--caches user``: the time to the first decoded
token (prefill and one decode step, compiling included), then greedy
decode speed. A decode step's time is the time between two consecutive
tokens (a stopping criterion that never stops reads the clock after each),
the median over --runs generate() calls of 1 + N tokens: the prefill, which
transformers runs eagerly, is left out, and so is how its time varies from
one generate() to the next (by 70-240 ms for GPT-2 small in one max process
on a 2-core Intel Xeon, which a difference of two generate() times charged
to the decode steps).
Every generate() uses one cache length, so each backend compiles one
decode graph per batch size. A second fresh process over the caches the
first filled times the first token warm, and one more, with empty caches
and background compilation, max's first token while its graph compiles.
The memory-bandwidth bound is what a decode step must read (the weights
once, a tied embedding once, the KV cache up to the tokens attended) over
the machine's measured read bandwidth (benchmarks.bandwidth).

With ``--device cuda`` the model and its inputs live on the GPU and every
clock is read after torch.cuda.synchronize(); the CPU's figures (the
bandwidth bound, the OpenMP-thread runs of max, product timings) are left
out, and ``--docs`` writes the GPU's section, leaving the CPU vendors'.
``--json PATH`` writes every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmarks import bandwidth, device
from benchmarks.child import ChildFailed, cache_env, child_json, turn_order
from benchmarks.decode_docs import docs_markers, machine_line, markdown
from benchmarks.decode_models import (
    StepClock,
    _bytes_per_step,
    build,
    generate_exactly,
)
from benchmarks.decode_tables import (
    HEADERS,
    _first_token_rows,
    _rows,
    first_token_headers,
)
from benchmarks.docs_sections import command_line, replace_section, vendor_label
from benchmarks.machine import machine, product_timings_carried

BACKENDS = ("eager", "inductor", "max")
ROOT = Path(__file__).resolve().parent.parent


def _measure(name: str, backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """Per batch size: the first decoded token, then decode speed (with
    ``--first-only``, the first batch size's first token alone)."""
    import torch
    from transformers.generation.configuration_utils import CompileConfig

    from torch_max_backend import FallbackWarning, compile_stats, reset_compile_stats

    where = getattr(args, "device", "cpu")
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    torch.manual_seed(0)
    model = build(name).eval().to(where)
    config = None
    if backend != "eager":
        config = CompileConfig(backend=backend)
        config._compile_all_devices = True  # transformers compiles on GPUs only else
    capacity = args.prompt + args.new_tokens + 1
    results: dict[str, Any] = {}
    for batch in args.batches:
        ids = torch.randint(0, model.config.vocab_size, (batch, args.prompt))
        ids = ids.to(where)

        def generate(
            new: int, ids: torch.Tensor = ids, clock: StepClock | None = None
        ) -> torch.Tensor:
            return generate_exactly(model, ids, new, capacity, config, clock)

        def decode_steps(batch: int = batch) -> list[float]:
            steps = []
            for _ in range(args.runs):
                clock = StepClock(batch, where)
                generate(1 + args.new_tokens, clock=clock)
                steps += clock.steps()
            return steps

        with torch.no_grad(), warnings.catch_warnings(record=True) as fell_back:
            # A graph MAX failed to compile runs in PyTorch with a warning:
            # its figures are then not max_backend's, and the table says so.
            warnings.simplefilter("always", FallbackWarning)
            reset_compile_stats()
            device.synchronize(where)
            start = time.perf_counter()
            tokens = generate(2)  # the prefill's token, then one decode step
            device.synchronize(where)
            first = time.perf_counter() - start
            stats = compile_stats()
            if args.first_only:
                return {"first_token_s": first, "graphs_built": stats.graphs_built}
            generate(2)  # warm
            steps = decode_steps()
        step = statistics.median(steps)
        attended = args.prompt + args.new_tokens / 2
        results[str(batch)] = {
            "first_token_s": first,
            "graphs_built": stats.graphs_built,
            "warm_starts": stats.warm_starts,
            "step_ms": step * 1e3,
            "tokens_per_s": batch / step,
            "bytes_per_step": _bytes_per_step(model, batch, attended),
            "tokens": tokens[:, args.prompt :].tolist(),
            "fallbacks": sum(
                issubclass(w.category, FallbackWarning) for w in fell_back
            ),
        }
    return results


def _spawn(
    name: str,
    backend: str,
    args: argparse.Namespace,
    env: dict[str, str],
    first_only: bool = False,
    torch_threads: int = 0,
) -> dict[str, Any]:
    argv = ["-m", "benchmarks.decode", "--child", f"{name}:{backend}"]
    argv += ["--torch-threads", str(torch_threads)]
    argv += ["--batches", ",".join(map(str, args.batches))]
    argv += ["--prompt", str(args.prompt), "--new-tokens", str(args.new_tokens)]
    argv += ["--runs", str(args.runs)] + (["--first-only"] if first_only else [])
    argv += device.child_args(getattr(args, "device", "cpu"))
    try:
        return child_json(argv, env=env, timeout=args.timeout)
    except ChildFailed as e:
        print(e.stderr[-3000:])
        return {"failed": e.stderr.strip().splitlines()[-1][:200]}


def write_docs(section: str, where: str = "cpu") -> None:
    """Replace this CPU vendor's decode section; the other vendor's stays.
    With ``where`` cuda, the GPU's section, the CPU vendors' left alone."""
    label = device.GPU_LABEL if where == "cuda" else vendor_label(machine())
    begin, end = docs_markers(label, where)
    replace_section(ROOT / "docs" / "benchmarks.md", begin, end, section)


def _median_process(processes: list[dict[str, Any]]) -> dict[str, Any]:
    """One backend's figures from several processes: the first's, with the
    decode step each batch size took in the median process."""
    if len(processes) == 1 or any("failed" in p for p in processes):
        return processes[0]
    merged = {batch: dict(figures) for batch, figures in processes[0].items()}
    for batch, figures in merged.items():
        steps = [p[batch]["step_ms"] for p in processes]
        figures["step_ms"] = statistics.median(steps)
        figures["tokens_per_s"] = int(batch) / (figures["step_ms"] / 1e3)
        figures["process_step_ms"] = steps
        figures["fallbacks"] = max(p[batch]["fallbacks"] for p in processes)
    return merged


def _model_runs(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every backend's full run over empty caches (or the user's), a warm
    first-token run after each compiled one, and max with background compile;
    with ``--repeat N``, N - 1 more rounds of eager, Inductor and max (default
    settings) taking turns, each backend's speed their median process. On a
    GPU, max's OpenMP-thread variants are not run (they are CPU advice)."""
    on_cpu = getattr(args, "device", "cpu") == "cpu"
    runs: dict[str, Any] = {}
    repeats: dict[str, list[dict[str, Any]]] = {b: [] for b in BACKENDS}
    with contextlib.ExitStack() as stack:
        envs = {}
        for backend in BACKENDS:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="decode-"))
            cold = args.caches == "cold"
            carried = Path(tmp) if cold and on_cpu else None  # the CPU's timings
            stack.enter_context(product_timings_carried(carried))
            envs[backend] = env = cache_env(Path(tmp) if cold else None)
            runs[backend] = _spawn(name, backend, args, env)
            repeats[backend].append(runs[backend])
            if backend != "eager":
                runs[f"{backend}_warm"] = _spawn(name, backend, args, env, True)
            if backend == "max" and on_cpu:
                # PyTorch's OpenMP threads spin after each of generate()'s eager
                # ops and take the cores MAX's kernels then need; passive, they
                # sleep at once (set before the process starts, as a user would).
                passive = dict(env, OMP_WAIT_POLICY="PASSIVE")
                runs["max_passive"] = _spawn(name, backend, args, passive)
                # Or no OpenMP threads at all: generate()'s eager ops are small.
                runs["max_one_thread"] = _spawn(
                    name, backend, args, env, torch_threads=1
                )
            print(
                f"{name} {backend}: {runs[backend].get('failed', 'done')}", flush=True
            )
        for round_index in range(1, args.repeat):
            for backend in turn_order(list(BACKENDS), round_index):
                repeats[backend].append(_spawn(name, backend, args, envs[backend]))
    for backend in BACKENDS:
        runs[backend] = _median_process(repeats[backend])
        for batch, figures in runs[backend].items():
            if isinstance(figures, dict) and "process_step_ms" in figures:
                steps = ", ".join(f"{ms:.1f}" for ms in figures["process_step_ms"])
                print(f"{name} {backend} batch {batch}: step ms by process {steps}")
    with (
        tempfile.TemporaryDirectory(prefix="decode-") as tmp,
        product_timings_carried(
            Path(tmp) if args.caches == "cold" and on_cpu else None
        ),
    ):
        env = dict(
            cache_env(Path(tmp) if args.caches == "cold" else None),
            TORCH_MAX_BACKEND_BACKGROUND_COMPILE="1",
        )
        runs["max_background"] = _spawn(name, "max", args, env, True)
    return {k: {} if "failed" in v else v for k, v in runs.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument(
        "--batches", type=lambda s: [int(b) for b in s.split(",")], default=[1, 8]
    )
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--caches",
        choices=["cold", "user"],
        default="cold",
        help="cold: each backend's first process starts with empty compile caches",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="fresh processes per backend, taking turns; its speed is their "
        "median (a machine whose speed drifts needs 3 or more)",
    )
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--docs", action="store_true")
    parser.add_argument("--json", type=Path, help="write every figure here")
    device.add_argument(parser)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--first-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--torch-threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be 1 or more, not {args.repeat}")
    if args.child:
        name, backend = args.child.split(":")
        print(json.dumps(_measure(name, backend, args)), flush=True)
        return
    args.command = command_line("benchmarks.decode", argv)
    device.check_available(parser, args.device)
    on_cpu = args.device == "cpu"
    started = time.perf_counter()
    print(f"machine: {machine_line(args.device)}", flush=True)
    read = None
    if on_cpu:  # the CPU's bandwidth bounds nothing a GPU runs
        read = bandwidth.measure()
        print(f"memory read bandwidth: {read['gbps']:.1f} GB/s ({read['how']})")
    results = {name: _model_runs(name, args) for name in args.models.split(",")}
    if read is not None:
        read = _better_reading(read)
    gbps = None if read is None else read["gbps"]
    speed = tabulate(
        _rows(results, gbps, args.device), headers=HEADERS, tablefmt="github"
    )
    first = tabulate(
        _first_token_rows(results, str(args.batches[0])),
        headers=first_token_headers(args.caches),
        tablefmt="github",
    )
    print(speed, first, sep="\n\n")
    minutes = (time.perf_counter() - started) / 60
    if args.json:
        figures = {
            "machine": machine(),
            "command": args.command,
            "device": args.device,
            "options": {
                key: getattr(args, key)
                for key in ("batches", "prompt", "new_tokens", "runs", "caches")
            }
            | {"repeat": args.repeat},
            "read": read,
            "duration_s": minutes * 60,
            "results": results,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if args.docs:
        write_docs(markdown((speed, first), args, read, minutes), args.device)


def _better_reading(read: dict[str, Any]) -> dict[str, Any]:
    """The VM's bandwidth drifts with its neighbours: the bound takes the
    better of a reading before (``read``) and one after, so that no share is
    overstated."""
    after = bandwidth.measure()
    print(f"memory read bandwidth after: {after['gbps']:.1f} GB/s")
    if after["gbps"] > read["gbps"]:
        read, after = after, read
    read["how"] += (
        f"; the better of two readings, before and after (other {after['gbps']:.1f})"
    )
    return read


if __name__ == "__main__":
    main()
