"""The command line: the generated op table stays in step with the registry."""

from __future__ import annotations

from pathlib import Path

from torch_max_backend.cli import main, ops_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "ops.md"


def test_docs_ops_is_up_to_date():
    assert DOC.read_text() == ops_markdown(), (
        "docs/ops.md is stale: run `torch-max-backend ops --write docs/ops.md`"
    )


def test_ops_lists_registered_overloads(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "`aten.addmm.default`" in out and "| lowered" in out
    assert "`aten.convolution_backward.default`" in out


def test_doctor_names_versions_and_devices(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "max 26.7.0" in out and "MAX devices:" in out and "cpu" in out.lower()
