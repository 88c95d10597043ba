"""The compile progress line: shown for long compiles on a terminal, else quiet."""

from __future__ import annotations

import io
import time

from torch_max_backend.runtime.progress import compile_progress, wanted


def test_long_compile_shows_and_finishes_its_line():
    out = io.StringIO()
    with compile_progress(
        "graph forward_0 (12 ATen ops, cpu)",
        enabled=True,
        delay=0.05,
        interval=0.05,
        stream=out,
    ):
        time.sleep(0.4)
    text = out.getvalue()
    assert (
        "\rtorch-max-backend: compiling graph forward_0 (12 ATen ops, cpu)... " in text
    )
    assert text.endswith("s\n")
    assert "compiled graph forward_0 (12 ATen ops, cpu) in 0." in text


def test_quick_or_disabled_compiles_print_nothing():
    out = io.StringIO()
    with compile_progress("g", enabled=True, delay=5.0, stream=out):
        pass  # a cache hit: done before the delay
    with compile_progress("g", enabled=False, delay=0.0, stream=out):
        time.sleep(0.05)
    assert out.getvalue() == ""


def test_only_terminals_get_the_line_unless_verbose():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert not wanted(False, io.StringIO())
    assert wanted(True, io.StringIO())
    assert wanted(False, Terminal())
