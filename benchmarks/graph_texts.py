"""The MAX graph text built for each benchmark-suite model, without compiling.

    python -m benchmarks.graph_texts OUT_DIR [--cases mlp,gpt2,...]
        [--models t5,deberta-v2,llama,gpt2-decode]

Writes ``OUT_DIR/<case>.txt``: every MAX graph the backend hands to MAX's
compiler for that case, in order; ``--models`` adds the call-overhead
models (benchmarks/call_split.py: small Hugging Face models and GPT-2's
decode step over a static KV cache, whose graphs write cache slots in
place and read grouped keys and values). Nothing is compiled: MAX's compile is
replaced by a recorder that refuses, so each graph then runs in PyTorch, and
the backend's own artifact cache is pointed at an empty directory so that no
saved artifact short-cuts the compile. Graphs compile in this process (no
compile workers, no background compilation, no product upgrade), and
products take the fixed rules rather than this machine's timed choice, so
that the texts depend on the code alone. Two checkouts that write identical
files build identical graphs, which is how a change that must not alter what
MAX sees (a refactor) proves it.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

_SETTINGS = {
    "TORCH_MAX_BACKEND_COMPILE_WORKERS": "1",
    "TORCH_MAX_BACKEND_BACKGROUND_COMPILE": "0",
    "TORCH_MAX_BACKEND_UPGRADE_PRODUCTS": "0",
    "TORCH_MAX_BACKEND_PRODUCT_STRATEGY": "rule",
}


class _Refused(RuntimeError):
    pass


def _run_case(case: str) -> None:
    from benchmarks import cases

    cases.measure(case, "max", runs=1, max_seconds=0.0, first_call_only=True)


def _run_model(name: str) -> None:
    from benchmarks.call_split import model_and_inputs
    from torch_max_backend import max_backend

    model, inputs = model_and_inputs(name)
    with torch.no_grad():
        torch.compile(model, backend=max_backend)(**inputs)


def record(case: str, run: Callable[[str], None] = _run_case) -> list[str]:
    """The text of every MAX graph compiled for ``case``, in order."""
    from max.engine import InferenceSession

    texts: list[str] = []

    def recording(self: InferenceSession, graph: object, *args, **kwargs):
        # Graphs compiled together arrive as one MAX module: its MLIR text.
        to_text = getattr(graph, "_to_mlir_str", None)
        texts.append(to_text() if to_text is not None else str(graph))
        raise _Refused("graph_texts: recorded, not compiled")

    original = InferenceSession.compile
    InferenceSession.compile = recording  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch._dynamo.reset()
            run(case)
    finally:
        InferenceSession.compile = original  # type: ignore[method-assign]
    return texts


def main() -> None:
    from benchmarks.cases import CASES

    # Each refused compile is logged as a fallback: expected here.
    logging.getLogger("torch_max_backend").setLevel(logging.ERROR)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--models", default="", help="call_split's models too")
    args = parser.parse_args()
    # MAX's compile is replaced in this process only: nothing may compile
    # elsewhere, and no timing may decide a graph.
    for name, value in _SETTINGS.items():
        os.environ.setdefault(name, value)
    derived = tempfile.mkdtemp(prefix="graph_texts_")
    os.environ["MODULAR_DERIVED_PATH"] = derived
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(case, _run_case) for case in args.cases.split(",") if case]
    jobs += [(name, _run_model) for name in args.models.split(",") if name]
    for case, run in jobs:
        # The kernel library's path names the throwaway cache directory.
        texts = [text.replace(derived, "<cache>") for text in record(case, run)]
        (args.out / f"{case}.txt").write_text("\n\n".join(texts))
        print(f"{case}: {len(texts)} graphs, {sum(map(len, texts))} characters")


if __name__ == "__main__":
    main()
