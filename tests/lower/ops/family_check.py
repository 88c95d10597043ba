"""The build check every op family's test module runs: each OpInfo case
reaching one of the family's lowerings builds (or is a listed expected
failure), and every lowering of the family is reached by some case or named
in the family's table of lowerings tested by hand.

Building costs milliseconds and compiles nothing; numerics are compared by
the OpInfo sweep (tests/opinfo), which shares these builds within a process.
"""

from __future__ import annotations

from collections.abc import Iterable

from opinfo.expected import EXPECTED_FAILURES
from opinfo.test_opinfo_sweep import build_results, core_cases

from torch_max_backend.lower.families import register_families
from torch_max_backend.lower.registry import MAPPING_TORCH_ATEN_TO_MAX


def family_ops(family: str) -> set[str]:
    """The ATen overloads the family's module registers."""
    register_families()
    module = f"torch_max_backend.lower.ops.{family}"
    return {
        str(op)
        for op, fn in MAPPING_TORCH_ATEN_TO_MAX.items()
        if getattr(fn, "__module__", "") == module
    }


def check_family(family: str, tested_by_hand: Iterable[str] = ()) -> None:
    """Fail when a case reaching the family does not build, or when one of
    its lowerings is neither reached by OpInfo nor listed in ``tested_by_hand``.

    A listed lowering that OpInfo does reach is not an error: which ops a case
    traces to can depend on its sample and on the decompositions in force.
    """
    ops = family_ops(family)
    assert ops, f"family {family} registers no lowering"
    by_hand = set(tested_by_hand)
    assert by_hand <= ops, f"not lowerings of {family}: {sorted(by_hand - ops)}"
    problems = build_results()
    cases = [c for c in core_cases() if c.built_ops & ops]
    failing = {
        c.name: problems[c.name]
        for c in cases
        if problems[c.name] is not None and c.name not in EXPECTED_FAILURES
    }
    assert not failing, f"{family}: cases that fail to build: {failing}"
    reached = set().union(*(c.built_ops for c in cases)) & ops
    unreached = ops - reached - by_hand
    assert not unreached, (
        f"{family}: lowerings no OpInfo case reaches; test them and list them "
        f"as tested by hand: {sorted(unreached)}"
    )
