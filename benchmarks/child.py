"""Benchmarks measure in fresh child processes; this runs one and reads its figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class ChildFailed(Exception):
    """A child process exited non-zero; ``stderr`` holds what it printed."""

    def __init__(self, returncode: int, stderr: str) -> None:
        self.returncode, self.stderr = returncode, stderr
        super().__init__(f"exit {returncode}")


def cache_env(directory: Path | None) -> dict[str, str]:
    """The environment of a child whose compile caches live in ``directory``
    (None: the user's own)."""
    env = dict(os.environ)
    if directory is not None:
        env["MODULAR_DERIVED_PATH"] = str(directory)
        env["TORCHINDUCTOR_CACHE_DIR"] = str(directory / "inductor")
    return env


def child_json(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run ``python *args`` from the repository root; the last line it prints,
    which a child writes as JSON. Raises ChildFailed, or subprocess's
    TimeoutExpired past ``timeout`` seconds."""
    done = subprocess.run(
        [sys.executable, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise ChildFailed(done.returncode, done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_json_or_exit(
    args: list[str],
    what: str,
    *,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """``child_json``, ending the benchmark with the child's error output,
    naming ``what`` failed, when the child fails."""
    try:
        return child_json(args, env=env, timeout=timeout)
    except ChildFailed as e:
        raise SystemExit(f"{what} failed:\n{e.stderr[-3000:]}") from e


def turn_order(items: list[str], round_index: int) -> list[str]:
    """The order of round ``round_index`` when each backend's process runs
    once a round: each round starts one further along, so that no backend
    always runs first or last (a machine that slows the later processes of
    a round, or the earlier, would otherwise favour one)."""
    if not items:
        return []
    start = round_index % len(items)
    return items[start:] + items[:start]
