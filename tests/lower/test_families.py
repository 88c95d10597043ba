"""Tests mirror the lowering room: one test module per op family."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch_max_backend.lower.ops as family_package
from torch_max_backend.lower import families
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


def test_a_family_that_fails_to_import_is_named_at_every_call(monkeypatch):
    # Importing a family again after it failed would meet the lowerings it
    # registered before failing ("registered twice") and hide the cause.
    real_import = families.importlib.import_module

    def failing(name: str):
        if name.endswith(".foreach"):
            raise AttributeError("'_OpNamespace' 'aten' object has no attribute 'x'")
        return real_import(name)

    monkeypatch.setattr(families, "_registered", False)
    monkeypatch.setattr(families, "_failure", None)
    monkeypatch.setattr(families.importlib, "import_module", failing)
    for _ in range(2):
        with pytest.raises(
            RuntimeError, match=r"'foreach' lowerings .*no attribute 'x'"
        ):
            families.register_families()
