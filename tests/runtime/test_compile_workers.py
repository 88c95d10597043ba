"""Compile workers: graphs ready together compile side by side in worker
processes, the number of workers follows the usable cores and memory, and a
normal exit finishes the compiles it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch

from torch_max_backend.runtime import compile_workers

# Two graphs of different structures compiled in the background, cold (an
# empty cache directory), then a third started just before the process ends.
_CHILD = """
import json, sys, torch
import torch_max_backend as tmb
from torch_max_backend.runtime import compile_workers
from torch_max_backend.runtime.session import COMPILE_LOG

options = {"background_compile": True}
first = torch.compile(lambda x: torch.sin(x) * 3 + 1, backend="max", options=options)
second = torch.compile(lambda x: torch.cos(x).sum(0) - 2, backend="max", options=options)
x = torch.randn(4, 5)
torch.testing.assert_close(first(x), torch.sin(x) * 3 + 1)
torch.testing.assert_close(second(x), torch.cos(x).sum(0) - 2)
assert tmb.wait_compiled(timeout=600)
records = [r for r in COMPILE_LOG if not r.cached]
spans = [(r.started, r.started + r.seconds, r.from_disk) for r in records]
stats = tmb.compile_stats()
print(json.dumps({"workers": compile_workers.worker_count(), "spans": spans,
                  "eager_calls": stats.eager_calls, "max_compiles": stats.max_compiles}))
sys.stdout.flush()
third = torch.compile(lambda x: torch.tanh(x) / 2 - x, backend="max", options=options)
torch.testing.assert_close(third(x), torch.tanh(x) / 2 - x)
"""


def _child_env(cache: Path, workers: int) -> dict[str, str]:
    env = dict(os.environ)
    env["MODULAR_DERIVED_PATH"] = str(cache)
    env["TORCH_MAX_BACKEND_COMPILE_WORKERS"] = str(workers)
    return env


def test_two_graphs_compile_side_by_side_and_exit_finishes_the_third(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        env=_child_env(tmp_path, 2),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["workers"] == 2
    assert report["max_compiles"] == 2 and report["eager_calls"] == 2
    (a_start, a_end, a_disk), (b_start, b_end, b_disk) = report["spans"]
    assert not a_disk and not b_disk  # real compiles, from an empty cache
    # Side by side: each began before the other ended.
    assert a_start < b_end and b_start < a_end
    # The third graph's compile was finished at exit and its artifact saved.
    artifacts = list((tmp_path / "cache" / "torch_max_backend").rglob("*.mef"))
    assert len(artifacts) == 3


def test_default_workers_follow_affinity_and_memory(monkeypatch):
    monkeypatch.setattr(compile_workers, "usable_cores", lambda: 8)
    monkeypatch.setattr(compile_workers, "available_memory", lambda: 5 * 2**30)
    assert compile_workers.default_workers() == 2  # 2 GiB a worker
    monkeypatch.setattr(compile_workers, "available_memory", lambda: 64 * 2**30)
    assert compile_workers.default_workers() == 8
    monkeypatch.setattr(compile_workers, "available_memory", lambda: 2**30)
    assert compile_workers.default_workers() == 1
    monkeypatch.setattr(compile_workers, "available_memory", lambda: None)
    assert compile_workers.default_workers() == 8


def test_usable_cores_is_the_affinity_mask():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity masks on this platform")
    assert compile_workers.usable_cores() == len(os.sched_getaffinity(0))


def test_the_first_compile_fixes_the_worker_count(monkeypatch):
    monkeypatch.setattr(compile_workers, "_workers", None)
    assert compile_workers.worker_count(3) == 3
    assert compile_workers.worker_count(1) == 3  # fixed for the process
    assert compile_workers.worker_count() == 3


_KILLED = """
import os, signal, time, torch
import torch_max_backend as tmb
from torch_max_backend.runtime import compile_workers

fn = torch.compile(lambda x: torch.exp(x) + 5, backend="max",
                   options={"background_compile": True})
x = torch.randn(3, 4)
torch.testing.assert_close(fn(x), torch.exp(x) + 5)
deadline = time.monotonic() + 60
while not compile_workers._pool._executor._processes:
    assert time.monotonic() < deadline
    time.sleep(0.1)
time.sleep(1.0)  # the worker has the graph now
for process in list(compile_workers._pool._executor._processes.values()):
    os.kill(process.pid, signal.SIGKILL)
assert tmb.wait_compiled(timeout=600)
torch.testing.assert_close(fn(x), torch.exp(x) + 5)
print("compiles", tmb.compile_stats().max_compiles)
"""


def test_a_killed_worker_is_replaced_and_the_graph_compiled_again(tmp_path):
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", _KILLED],
        env=_child_env(tmp_path, 2),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "a compile worker died; compiling the graph again" in done.stderr
    assert done.stdout.strip().splitlines()[-1] == "compiles 1"
    assert "runs in PyTorch" not in done.stderr  # it did reach MAX


def test_a_compile_dropped_at_exit_is_not_waited_for(monkeypatch):
    """Exit finishes the compiles it tracks; an upgrade's is not among them
    (pipeline/product_upgrade.py: a script's exit must not wait a minute for it)."""
    monkeypatch.setattr(compile_workers, "worker_count", lambda *args: 1)
    release = threading.Event()
    cpu = torch.device("cpu")
    with compile_workers.dropped_at_exit():
        dropped = compile_workers._start(lambda pool: None, release.wait, cpu)
    kept = compile_workers._start(lambda pool: None, release.wait, cpu)
    try:
        with compile_workers._lock:
            tracked = set(compile_workers._unfinished)
        assert kept in tracked
        assert dropped not in tracked
    finally:
        release.set()
    assert dropped.result(timeout=60) and kept.result(timeout=60)


def test_optional_compiles_go_to_the_low_priority_pool(monkeypatch):
    """A compile started at_low_priority() (a product upgrade) is handed to
    the low-priority pool, any other to the shared one."""
    handed: list[str] = []

    class Pool:
        def __init__(self, name: str) -> None:
            self.name = name

    monkeypatch.setattr(compile_workers, "worker_count", lambda *args: 2)
    monkeypatch.setattr(compile_workers, "_worker_pool", lambda n: Pool("shared"))
    monkeypatch.setattr(compile_workers, "_low_priority_pool", lambda: Pool("low"))

    def submit(pool: Pool) -> Future:
        handed.append(pool.name)
        done: Future = Future()
        done.set_result(None)
        return done

    cpu = torch.device("cpu")
    with compile_workers.dropped_at_exit():
        with compile_workers.at_low_priority():
            compile_workers._start(submit, lambda: None, cpu).result(timeout=60)
        compile_workers._start(submit, lambda: None, cpu).result(timeout=60)
    assert handed == ["low", "shared"]


def test_the_low_priority_worker_runs_at_the_lowest_priority():
    if not hasattr(os, "getpriority"):
        pytest.skip("no process priorities on this platform")
    pool = compile_workers._low_priority_pool()
    try:
        niceness = pool._executor.submit(os.getpriority, os.PRIO_PROCESS, 0)
        assert niceness.result(timeout=300) == compile_workers.LOW_PRIORITY
    finally:
        compile_workers._drop_pool(pool)
    assert compile_workers._low_pool is None
