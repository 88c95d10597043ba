"""benchmarks/step_split.py's arithmetic, which needs no compile: a step's
time-stamped points become named segments that add up to the step."""

from __future__ import annotations

import pytest

from benchmarks import step_split

# One step of two graphs: points in seconds.
POINTS = [
    ("step", 0.0),
    ("g0 call", 0.001),
    ("g0 execute", 0.0012),
    ("g0 execute end", 0.004),
    ("g0 call end", 0.0041),
    ("g1 call", 0.0050),
    ("g1 execute", 0.0052),
    ("g1 execute end", 0.0090),
    ("g1 call end", 0.0093),
    ("step end", 0.0100),
]


def test_a_step_splits_into_calls_executes_and_the_work_between():
    segments = step_split._segments(POINTS)
    assert segments["between step and g0 call"] == pytest.approx(1.0)
    assert segments["g0: MAX execute"] == pytest.approx(2.8)
    # Before and after the execute: both our call path.
    assert segments["g0: our call path"] == pytest.approx(0.3)
    assert segments["between g0 call end and g1 call"] == pytest.approx(0.9)
    assert segments["g1: our call path"] == pytest.approx(0.5)
    assert segments["between g1 call end and step end"] == pytest.approx(0.7)
    assert sum(segments.values()) == pytest.approx(10.0)


def test_the_description_sums_executes_and_the_work_between_graphs():
    figures = dict(step_split._segments(POINTS), **{"whole step": 10.0})
    first, *rest = step_split.describe("mlp-train", figures, replay=False)
    assert "step 10.000 ms" in first
    assert "MAX execute 6.600 ms" in first
    assert "between graphs 2.600 ms" in first
    assert len(rest) == len(figures) - 1
    replayed = step_split.describe("mlp-train", figures, replay=True)[0]
    assert "replayed" in replayed
