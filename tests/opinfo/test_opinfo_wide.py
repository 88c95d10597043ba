"""More OpInfo samples for the op families whose lowerings read shapes the most.

Reductions, views and rearrangements, scatters and indexing take dims, sizes
and strides from their arguments: one sample per op (the main sweep) misses
the empty tensors, 0-d tensors, negative dims and broadcasts where such a
lowering breaks. Here every sample (up to ``WIDE_SAMPLES``) of those cases is
built, and each sample that builds is compared with eager PyTorch in a few
shared graphs. A sample may be refused by a lowering's capability check (it
then runs in PyTorch); any other failure to build is a bug of ours.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import pytest
import torch

from torch_max_backend import UnsupportedOpsError
from torch_max_backend.lower.builder import build_graph
from torch_max_backend.lower.registry import (
    MAPPING_TORCH_ATEN_TO_MAX,
    decomposition_table,
)

from .expected import (
    DEFAULT_TOLERANCE,
    EXPECTED_FAILURES,
    NOT_COMPILED,
    NUMERIC_FAILURES,
    TOLERANCES,
)
from .sweep import Case, all_cases, batch_mismatches, trace
from .test_opinfo_sweep import core_cases

WIDE_SAMPLES = int(os.environ.get("TORCH_MAX_BACKEND_OPINFO_WIDE_SAMPLES", "12"))
# Compared with eager: this many samples past the first per case, in
# WIDE_BATCHES graphs. MAX's compile time grows faster than a graph's size
# (a graph of ~230 samples ran over 20 min), so the batches stay near the
# main sweep's size.
WIDE_COMPARED = 3
WIDE_BATCHES = 6
# Lowering modules (lowering/ops/<family>.py) whose cases get every sample.
WIDE_FAMILIES = {
    "arg_reduction",
    "reduction",
    "shape",
    "rearrange",
    "scatter",
    "indexing",
}
# Cases left out, with the reason.
SKIPPED = {
    # Its later samples view storage past the input's own elements, which a
    # sample's fresh input copy does not have: eager PyTorch fails on them.
    "as_strided.partial_views": "samples read storage the sample's copy lacks",
    # Later samples draw random masks (the first does not), which the
    # comparison would have to know to compare by shape only.
    "nn.functional.dropout": "later samples are random",
    # Its masks are drawn by bernoulli_ (on MAX, from MAX's stream).
    "nn.functional.dropout3d": "later samples are random",
}
# Cases whose later samples cannot match eager value for value: left out of
# the compared batches. Each sample of theirs matches alone where it draws
# nothing at random (checked 2026-12-04).
NUMERIC_FAILURES_WIDE = {
    "nn.functional.scaled_dot_product_attention": "samples 2 and 3 draw dropout "
    "(dropout_p=0.5): random",
    "nn.functional.multi_head_attention_forward": "samples 1 and 3 draw dropout "
    "(dropout_p=0.5, training): random",
}


def _families(case: Case) -> set[str]:
    families = set()
    for op in MAPPING_TORCH_ATEN_TO_MAX:
        if str(op) in case.aten_ops:
            module = MAPPING_TORCH_ATEN_TO_MAX[op].__module__
            families.add(module.rsplit(".", 1)[-1])
    return families


@functools.cache
def wide_cases() -> tuple[Case, ...]:
    excluded = set(EXPECTED_FAILURES) | set(NUMERIC_FAILURES) | set(NOT_COMPILED)
    core = {
        c.name: c
        for c in core_cases()
        if c.name not in excluded | set(SKIPPED) and _families(c) & WIDE_FAMILIES
    }
    cases = all_cases(WIDE_SAMPLES, frozenset(core))
    for case in cases:
        case.aten_ops = core[case.name].aten_ops
    return cases


@dataclass
class Outcomes:
    """What building each sample past the first gave, per case."""

    built: dict[str, list[int]] = field(default_factory=dict)
    refused: int = 0
    errors: list[str] = field(default_factory=list)


@functools.cache
def outcomes() -> Outcomes:
    result = Outcomes()
    for case in wide_cases():
        result.built[case.name] = []
        for i, sample in enumerate(case.samples[1:], start=1):
            failure: list[BaseException] = []

            def check(gm: torch.fx.GraphModule, failure: list = failure) -> None:
                try:
                    build_graph(gm)
                except Exception as e:
                    failure.append(e)

            try:
                trace(sample.fn, sample.inputs(), decomposition_table(), check=check)
            except Exception:
                continue  # AOTAutograd cannot trace it (data-dependent sizes)
            if not failure:
                result.built[case.name].append(i)
            elif isinstance(failure[0], UnsupportedOpsError):
                result.refused += 1  # a capability check declined it
            else:
                error = failure[0]
                lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
                text = f"{type(error).__name__}: {' | '.join(lines[:3])[:400]}"
                result.errors.append(f"{case.name} sample {i}: {text}")
    return result


def test_every_sample_builds_or_is_refused():
    assert len(wide_cases()) > 60, f"only {len(wide_cases())} wide cases"
    found = outcomes()
    assert not found.errors, "samples whose MAX graph fails to build:\n" + "\n".join(
        found.errors
    )
    assert sum(len(v) for v in found.built.values()) > 300


@pytest.mark.parametrize("batch", range(WIDE_BATCHES))
def test_wide_samples_match_eager(batch):
    built = outcomes().built
    cases = [
        Case(c.name, [c.samples[i] for i in built[c.name][:WIDE_COMPARED]], c.aten_ops)
        for c in wide_cases()
        if built.get(c.name) and c.name not in NUMERIC_FAILURES_WIDE
    ][batch::WIDE_BATCHES]
    mismatches = batch_mismatches(cases, TOLERANCES, DEFAULT_TOLERANCE)
    assert not mismatches, "\n".join(mismatches)
