"""Tests mirror the lowering room: one test module per op family."""

from __future__ import annotations

from pathlib import Path

import torch_max_backend.lower.ops as family_package
from torch_max_backend.lower.families import FAMILIES

TESTS = Path(__file__).parent / "ops"


def test_every_family_module_is_listed_and_has_a_test_module():
    modules = {p.stem for p in Path(family_package.__file__).parent.glob("*.py")} - {
        "__init__"
    }
    assert modules == set(FAMILIES), (
        f"modules not listed in FAMILIES: {sorted(modules - set(FAMILIES))}; "
        f"listed without a module: {sorted(set(FAMILIES) - modules)}"
    )
    missing = [f for f in FAMILIES if not (TESTS / f"test_{f}.py").is_file()]
    assert not missing, f"families without tests/lower/ops/test_<family>.py: {missing}"
    assert list(FAMILIES) == sorted(FAMILIES)
