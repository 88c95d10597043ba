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


def test_ops_in_a_fresh_process_sees_every_lowering():
    # The package imports lazily: the command itself must register the lowerings.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "torch_max_backend.cli", "ops"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ": 190 lowered, 0 decomposed, 3 gap." in done.stdout


def test_doctor_names_versions_and_devices(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "max 26.7.0" in out and "MAX devices:" in out and "cpu" in out.lower()


def test_cache_command_lists_and_clears_max_caches(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(tmp_path))
    graphs = tmp_path / "cache" / ".max_cache" / "mof"
    graphs.mkdir(parents=True)
    (graphs / "a.mef").write_bytes(b"x" * 2048)
    (graphs / "b.mef").write_bytes(b"y" * 1024)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if ".max_cache" in x)
    assert str(tmp_path / "cache" / ".max_cache") in line
    assert "compiled MAX graphs" in line and " 2 " in line
    assert main(["cache", "--clear"]) == 0
    assert "0.0 MiB freed" in capsys.readouterr().out  # 3 KiB rounds to 0.0
    assert not graphs.exists()
    # Clearing what is not there is not an error.
    assert main(["cache", "--clear"]) == 0
