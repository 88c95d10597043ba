"""The decode benchmark's section of docs/benchmarks.md: its text around
the tables, and the markers of each CPU vendor's section and of the GPU's
(``--device cuda``)."""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.device import GPU_LABEL, gpu_line
from benchmarks.docs_sections import markers, vendor_label
from benchmarks.machine import cpu_line, machine

COMMAND = "python -m benchmarks.decode --docs"
GPU_COMMAND = f"{COMMAND} --device cuda"


def docs_markers(vendor: str, where: str = "cpu") -> tuple[str, str]:
    """The decode section's markers for a CPU vendor's run, or with
    ``where`` cuda a GPU run's ("GPU" as the vendor)."""
    return markers("decode", vendor, GPU_COMMAND if where == "cuda" else COMMAND)


def machine_line(where: str = "cpu") -> str:
    """The CPU, with ``where`` cuda the GPU too, BLAS and versions."""
    import transformers

    m = machine()
    gpu = f"; GPU: {gpu_line(m)}" if where == "cuda" else ""
    return (
        f"{cpu_line(m)}{gpu}; vendor BLAS: {m['vendor_blas']}; torch {m['torch']}, "
        f"max {m['max']}, transformers {transformers.__version__}"
    )


def markdown(
    tables: tuple[str, str],
    args: argparse.Namespace,
    read: dict[str, Any] | None,
    minutes: float,
) -> str:
    if getattr(args, "device", "cpu") == "cuda" or read is None:
        return gpu_markdown(tables, args, minutes)
    vendor = vendor_label(machine())
    begin, end = docs_markers(vendor)
    return "\n".join(
        [
            begin,
            f"## Decoding on {vendor}: transformers' generate() with a static KV cache",
            "",
            f"`{args.command}`, {minutes:.0f} minutes on {machine_line()}.",
            "",
            f"Prompt {args.prompt} tokens, {args.new_tokens} new tokens, greedy, "
            "random weights; GPT-2 small (124M parameters, LM head tied to the "
            "embedding) and a llama-style model (8 layers, 512 wide, 8 query and 4 "
            "key/value heads, 32k vocabulary, 58M parameters). *tok/s* is decode "
            "only: the median time from one token to the next over "
            f"{args.runs} generate() calls (the prefill left out)"
            + (
                f"; eager, Inductor and max: the median of {args.repeat} fresh "
                "processes, the three taking turns round by round, each round "
                "starting with the next, so that a drift of the machine's "
                "speed slows them alike"
                if args.repeat > 1
                else ""
            )
            + ". *max*: default settings, under which the backend "
            "quiets PyTorch's OpenMP threads itself (`quiet_torch_threads`: they "
            "sleep soon after each of generate()'s eager ops instead of "
            "spinning). *OMP passive*: max_backend in a process started "
            "with `OMP_WAIT_POLICY=PASSIVE`, so that PyTorch's OpenMP threads sleep "
            "after each of generate()'s eager ops instead of spinning on the cores "
            "MAX's kernels need next; eager and Inductor keep PyTorch's default, "
            "which suits them (the ratios compare with those). *1 torch "
            "thread*: max_backend in a process that called "
            "`torch.set_num_threads(1)` first, so that generate()'s eager ops "
            "(small: transformers runs the prefill eagerly, which the tokens/s "
            "leave out) start no OpenMP threads at all. "
            "The bound is the memory read bandwidth over the bytes "
            "a decode step must read: the weights once and the KV cache attended. "
            f"Read bandwidth here: {read['gbps']:.1f} GB/s ({read['how']}). "
            "Each backend's process runs the batch sizes in this order, so "
            "every batch size after the first reaches the backend as a graph "
            "whose batch is symbolic (Dynamo's automatic dynamic shapes; "
            "CompileConfig's dynamic=None), as for any user who generates at a "
            "second batch size. *ran in PyTorch*: a graph fell back "
            "(FallbackWarning).",
            "",
            tables[0],
            "",
            f"Time to the first decoded token at batch {args.batches[0]}: a fresh "
            "process's first generate() of two tokens (the prefill's and one "
            "decode step's), compiling included; "
            + (
                "*user's caches*: the user's compile caches as earlier runs "
                "left them (`--caches user`: a graph found there is loaded, "
                "not compiled); "
                if args.caches == "user"
                else "*empty caches*: every compile cache empty but this "
                "machine's product timings (taken once per machine: a run "
                "that had to take them shows it here); "
            )
            + "*warm*: a "
            "second fresh process over the caches the first "
            "filled; *background compile*: `TORCH_MAX_BACKEND_BACKGROUND_COMPILE=1`"
            ", the decode step running in PyTorch until its MAX graph is ready. "
            "Seconds:",
            "",
            tables[1],
            "",
            end,
        ]
    )


def gpu_markdown(
    tables: tuple[str, str], args: argparse.Namespace, minutes: float
) -> str:
    """A ``--device cuda`` run's section, headed with the GPU's name: no
    bandwidth bound and no OpenMP-thread runs of max (the CPU's figures)."""
    m = machine()
    begin, end = docs_markers(GPU_LABEL, "cuda")
    return "\n".join(
        [
            begin,
            f"## Decoding on GPU ({m.get('gpu') or 'unknown'}): transformers' "
            "generate() with a static KV cache",
            "",
            f"`{args.command}`, {minutes:.0f} minutes on {machine_line('cuda')}.",
            "",
            f"Prompt {args.prompt} tokens, {args.new_tokens} new tokens, greedy, "
            "random weights, the models, inputs and KV cache on the GPU; every "
            "clock read after `torch.cuda.synchronize()`. *tok/s* is decode "
            "only: the median time from one token to the next over "
            f"{args.runs} generate() calls (the prefill left out)"
            + (
                f"; eager, Inductor and max: the median of {args.repeat} fresh "
                "processes, taking turns"
                if args.repeat > 1
                else ""
            )
            + ". The CPU's figures are left out (-): the OpenMP-thread runs "
            "of max and the memory-bandwidth bound. *ran in PyTorch*: a graph "
            "fell back (FallbackWarning).",
            "",
            tables[0],
            "",
            f"Time to the first decoded token at batch {args.batches[0]} "
            "(a fresh process's first generate() of two tokens, compiling "
            "included), seconds:",
            "",
            tables[1],
            "",
            end,
        ]
    )
