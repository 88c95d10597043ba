"""PyTorch's OpInfo database through torch.compile(backend=max_backend), in float32.

Cases are the OpInfo entries that PyTorch's core decompositions (and the few
the registry adds) turn into core ATen ops and the non-core ops we lower.
Graph building is checked for every case (fast); the numerical check
compiles the passing cases in ``BATCHES`` shared graphs against eager. ``TORCH_MAX_BACKEND_OPINFO_SAMPLES=N`` checks N samples per
case instead of one (slower: more and larger graphs).
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

from torch_max_backend.lower.registry import decomposition_table

from .expected import (
    CONSTANT_FOLDS,
    DEFAULT_TOLERANCE,
    EXPECTED_FAILURES,
    NOT_COMPILED,
    NUMERIC_FAILURES,
    TOLERANCES,
)
from .sweep import (
    VIEW_OPS,
    Case,
    all_cases,
    batch_mismatches,
    build_problem,
    maps_onto_core,
    ops_of,
    trace,
)

SAMPLES = int(os.environ.get("TORCH_MAX_BACKEND_OPINFO_SAMPLES", "1"))
BATCHES = 10
PASS_RATE = 0.90


@functools.cache
def core_cases() -> tuple[Case, ...]:
    return tuple(c for c in all_cases(SAMPLES) if maps_onto_core(c))


@functools.cache
def build_results() -> dict[str, str | None]:
    return {c.name: build_problem(c) for c in core_cases()}


def passing_cases() -> list[Case]:
    problems = build_results()
    return [
        c
        for c in core_cases()
        if problems[c.name] is None
        and c.name not in EXPECTED_FAILURES
        and c.name not in NUMERIC_FAILURES
        and c.name not in NOT_COMPILED
    ]


def test_expected_failure_table_is_current():
    names = {c.name for c in core_cases()}
    problems = build_results()
    listed = set(EXPECTED_FAILURES) | set(NUMERIC_FAILURES) | set(NOT_COMPILED)
    stale = sorted(listed - names)
    assert not stale, f"listed cases that are not core-mapping OpInfo cases: {stale}"
    unexpected = {
        name: problem
        for name, problem in problems.items()
        if problem is not None and name not in EXPECTED_FAILURES
    }
    assert not unexpected, "cases that fail to build:\n" + "\n".join(
        f"  {n}: {p}" for n, p in sorted(unexpected.items())
    )
    now_pass = sorted(n for n in EXPECTED_FAILURES if problems[n] is None)
    assert not now_pass, f"listed as failing but build fine (remove them): {now_pass}"


def test_no_case_leaves_max_constants_to_fold():
    build_results()  # fills each case's foldable ops
    folding = {c.name: sorted(set(c.foldable)) for c in core_cases() if c.foldable}
    unexpected = {n: ops for n, ops in folding.items() if n not in CONSTANT_FOLDS}
    assert not unexpected, (
        "MAX graphs with constant arithmetic MAX folds at compile time (do it in "
        f"Python, or start ranges at index_origin's zero): {unexpected}"
    )
    stale = sorted(set(CONSTANT_FOLDS) - set(folding))
    assert not stale, f"listed in CONSTANT_FOLDS but fold nothing now: {stale}"


def test_pass_rate_of_core_cases():
    total = len(core_cases())
    failing = len(set(EXPECTED_FAILURES) | set(NUMERIC_FAILURES) | set(NOT_COMPILED))
    rate = (total - failing) / total
    assert total > 300, f"only {total} core-mapping OpInfo cases found"
    assert rate >= PASS_RATE, f"{total - failing}/{total} = {rate:.1%} pass"


@pytest.mark.parametrize("batch", range(BATCHES))
def test_opinfo_batch_matches_eager(batch, built_graphs):
    cases = passing_cases()[batch::BATCHES]
    mismatches = batch_mismatches(cases, TOLERANCES, DEFAULT_TOLERANCE)
    assert not mismatches, "\n".join(mismatches)
    # Every case's ATen ops must have run on MAX, not eagerly after a graph
    # break.
    eager = {}
    for case in cases:
        sample = case.samples[0]
        ops = ops_of(trace(sample.fn, sample.inputs(), decomposition_table()))
        missing = ops - built_graphs.ops()
        if missing <= VIEW_OPS or all(_is_view(op) for op in missing):
            # Views of inputs, replayed by AOTAutograd (see VIEW_OPS); a graph
            # of views alone runs in PyTorch (lower.builder.computes_nothing).
            continue
        if missing:
            eager[case.name] = sorted(missing)
    assert not eager, f"ops that did not run on MAX: {eager}"


def _is_view(name: str) -> bool:
    """Whether the ATen overload ``aten.op.overload`` only makes a view."""
    _, op, overload = name.split(".")
    packet = getattr(torch.ops.aten, op, None)
    target = getattr(packet, overload, None)
    return isinstance(target, torch._ops.OpOverload) and target.is_view
