"""Diagnostics go through the ``torch_max_backend`` loggers; verbose and
profile still print to stderr in a program that configured no logging."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

import pytest
import torch

from torch_max_backend import logs, max_backend
from torch_max_backend.runtime import profile


def simple_math(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # The structure of test_backend's test_simple_math: a cache hit.
    return x + y * 2


_VERBOSE_RUN = """
import torch
from torch_max_backend import max_backend

def simple_math(x, y):
    return x + y * 2

x, y = torch.randn(3, 4), torch.randn(3, 4)
torch.testing.assert_close(torch.compile(simple_math, backend=max_backend)(x, y), x + y * 2)
print("done")
"""


def test_verbose_and_profile_print_to_stderr_without_logging_config():
    env = dict(os.environ, TORCH_MAX_BACKEND_VERBOSE="1", TORCH_MAX_BACKEND_PROFILE="1")
    done = subprocess.run(
        [sys.executable, "-c", _VERBOSE_RUN],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"  # nothing of ours on stdout
    err = done.stderr
    assert "ATen graph inference_" in err and "aten.mul.Tensor" in err
    assert "MAX graph inference_" in err and "rmo.add" in err
    assert "compiled inference_" in err
    # The profile table, logged at exit.
    assert "run mean us" in err and "MAX compile(s)" in err


def test_the_package_logger_receives_graphs_compiles_and_profile(caplog):
    torch._dynamo.reset()
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    with caplog.at_level(logging.DEBUG, logger="torch_max_backend"):
        compiled = torch.compile(
            simple_math, backend=max_backend, options={"profile": True}
        )
        torch.testing.assert_close(compiled(x, y), x + y * 2)
        profile.log_profile()
    by_logger: dict[str, list[str]] = {}
    for record in caplog.records:
        by_logger.setdefault(record.name, []).append(record.getMessage())
    graphs = "\n".join(by_logger["torch_max_backend.graphs"])
    assert "ATen graph inference_" in graphs and "MAX graph inference_" in graphs
    assert any(
        "compiled inference_" in m for m in by_logger["torch_max_backend.compile"]
    )
    assert any("run mean us" in m for m in by_logger["torch_max_backend.profile"])


def test_warnings_stay_warnings_and_are_logged(caplog):
    with (
        caplog.at_level(logging.WARNING, logger="torch_max_backend"),
        pytest.warns(RuntimeWarning, match="the cache is gone"),
    ):
        logs.warn("the cache is gone", RuntimeWarning, logger="cache")
    (record,) = [r for r in caplog.records if r.name == "torch_max_backend.cache"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "the cache is gone"


def test_nothing_is_printed_when_not_asked(capsys):
    # A logged warning reaches no last-resort handler: the warning itself is
    # the one message users see.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logs.warn("quiet", RuntimeWarning, logger="cache")
    captured = capsys.readouterr()
    assert "quiet" not in captured.err and "quiet" not in captured.out
    handlers = logging.getLogger("torch_max_backend").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_no_print_outside_the_cli():
    import ast
    from pathlib import Path

    package = Path(logs.__file__).parent
    printing = []
    for path in package.rglob("*.py"):
        if path.name in ("cli.py", "cli_aot.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "print"
            ):
                printing.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not printing, printing
