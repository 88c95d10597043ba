"""The MAX graph text built for each benchmark-suite model, without compiling.

    python -m benchmarks.graph_texts OUT_DIR [--cases mlp,gpt2,...]

Writes ``OUT_DIR/<case>.txt``: every MAX graph the backend hands to MAX's
compiler for that case, in order. Nothing is compiled: MAX's compile is
replaced by a recorder that refuses, so each graph then runs in PyTorch, and
the backend's own artifact cache is pointed at an empty directory so that no
saved artifact short-cuts the compile. Two checkouts that write identical
files build identical graphs, which is how a change that must not alter what
MAX sees (a refactor) proves it.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import warnings
from pathlib import Path

import torch


class _Refused(RuntimeError):
    pass


def record(case: str) -> list[str]:
    """The text of every MAX graph compiled for ``case``, in order."""
    from max.engine import InferenceSession

    from benchmarks import cases

    texts: list[str] = []

    def recording(self: InferenceSession, graph: object, *args, **kwargs):
        texts.append(str(graph))
        raise _Refused("graph_texts: recorded, not compiled")

    original = InferenceSession.compile
    InferenceSession.compile = recording  # type: ignore[method-assign]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch._dynamo.reset()
            cases.measure(case, "max", runs=1, max_seconds=0.0, first_call_only=True)
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
    args = parser.parse_args()
    derived = tempfile.mkdtemp(prefix="graph_texts_")
    os.environ["MODULAR_DERIVED_PATH"] = derived
    args.out.mkdir(parents=True, exist_ok=True)
    for case in args.cases.split(","):
        # The kernel library's path names the throwaway cache directory.
        texts = [text.replace(derived, "<cache>") for text in record(case)]
        (args.out / f"{case}.txt").write_text("\n\n".join(texts))
        print(f"{case}: {len(texts)} graphs, {sum(map(len, texts))} characters")


if __name__ == "__main__":
    main()
