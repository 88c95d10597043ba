"""The benchmark suite's plumbing: measuring a case, its tables, targets and docs.

Cheap by design: eager cases only (nothing compiles); the compiled backends'
figures come from running the suite itself, not from tests.
"""

from __future__ import annotations

import pytest

from benchmarks import cases, report
from benchmarks.run import main as run_main


def _row(case: str, backend: str, median_ms: float) -> dict:
    return {
        "case": case,
        "backend": backend,
        "caches": "cold",
        "first_call_s": 12.0,
        "median_ms": median_ms,
        "p10_ms": median_ms * 0.9,
        "p90_ms": median_ms * 1.1,
        "throughput_per_s": 1e3 / median_ms,
        "peak_rss_mib": 300.0,
        "max_abs_error": 1e-6,
        **({"warm_first_call_s": 1.5} if backend != "eager" else {}),
    }


ROWS = [
    _row("mlp", "eager", 10.0),
    _row("mlp", "inductor", 5.0),
    _row("mlp", "max", 4.0),
    _row("bert", "eager", 30.0),
    _row("bert", "max", 40.0),
]
OVERHEAD = {"eager_us": 3.0, "compiled_us": 80.0, "graph_us": 50.0, "execute_us": 40.0}


def test_eager_inference_case_is_measured():
    row = cases.measure("mlp", "eager", runs=50, max_seconds=0.0)
    assert row["case"] == "mlp" and row["backend"] == "eager"
    assert row["runs"] == 5  # at least five timed calls, even over the budget
    assert row["p10_ms"] <= row["median_ms"] <= row["p90_ms"]
    assert row["max_abs_error"] == 0.0
    assert row["throughput_per_s"] == pytest.approx(64 / (row["median_ms"] / 1e3))
    assert row["peak_rss_mib"] > 0


def test_eager_training_case_matches_its_reference():
    row = cases.measure("mlp-train", "eager", runs=3, max_seconds=60.0)
    # The same steps from the same weights: the parameters agree exactly.
    assert row["max_abs_error"] == 0.0
    assert row["runs"] == 3


def test_speedups_and_targets():
    lines = {line[0] + "/" + line[1]: line for line in report.table(ROWS)}
    assert lines["mlp/max"][8] == "2.50"  # 10 ms eager / 4 ms
    assert lines["mlp/eager"][2] == "-"  # eager compiles nothing
    assert lines["bert/max"][8] == "0.75"
    targets = {line[0]: line for line in report.targets(ROWS, OVERHEAD)}
    assert targets["MLP over eager"][2:] == ["2.50", "yes"]
    assert targets["MLP over Inductor"][2:] == ["1.25", "yes"]
    assert targets["BERT-base over eager"][2:] == ["0.75", "no"]
    assert targets["GPT-2 small over eager"][2:] == ["-", "-"]  # not run
    overhead = targets["per-call time / MAX execute (tiny graph)"]
    assert overhead[2].startswith("1.25x") and overhead[3] == "yes"


def test_docs_section_is_replaced_and_chart_drawn(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nIntro.\n\n## Compile time\n\nOld table.\n")
    results = {
        "machine": {
            "cpu": "Test CPU",
            "cores": 2,
            "memory_gib": 23.0,
            "gpu": None,
            "python": "3.11",
            "torch": "2.13.0",
            "max": "26.7.0",
        },
        "command": "python -m benchmarks.run",
        "duration_s": 600.0,
        "rows": ROWS,
        "overhead": OVERHEAD,
    }
    report.write_docs(results, tmp_path)
    report.write_docs(results, tmp_path)  # a second run replaces, never appends
    text = page.read_text()
    assert text.count(report.DOCS_BEGIN) == 1 and text.count(report.DOCS_END) == 1
    assert text.index("Intro.") < text.index(report.DOCS_BEGIN)
    assert text.index(report.DOCS_END) < text.index("## Compile time")
    assert "Test CPU, 2 cores" in text and "10 minutes" in text
    assert "| mlp     | max" in text and "BERT-base over eager" in text
    assert (tmp_path / report.CHART).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_model_or_backend_is_refused(capsys):
    with pytest.raises(SystemExit):
        run_main(["--models", "mlp,alexnet"])
    assert "unknown model 'alexnet'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_main(["--backends", "eager,tvm"])
    assert "unknown backend 'tvm'" in capsys.readouterr().err
