"""Long-running and concurrent use: many calls, two threads, two processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import torch

from benchmarks import soak
from torch_max_backend import compile_stats, reset_compile_stats
from torch_max_backend.storage.cache_dir import cache_root

ROOT = Path(__file__).resolve().parent.parent


def test_ten_thousand_calls_keep_resident_memory_flat(max_calls):
    result = soak.run(calls=10_000)
    assert result["wrong"] == 0
    assert result["growth_mib"] < soak.ALLOWED_GROWTH_MIB, result
    # Every call ran on MAX: one graph for every batch size, none in PyTorch.
    assert max_calls.of("inference") == 10_000 + soak.WARMUP_CALLS


def test_two_threads_calling_one_compiled_model_get_their_own_results(max_calls):
    model = soak.model()
    compiled = soak.compiled(model)  # the soak's graph: built once, shared
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def caller(seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        start.wait()  # both threads make the first (compiling) call at once
        try:
            for _ in range(200):
                x = torch.randn(4, soak.WIDTH, generator=generator)
                with torch.no_grad():
                    torch.testing.assert_close(compiled(x), model(x))
        except BaseException as e:  # reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=caller, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert max_calls.of("inference") == 400


_CHILD = """
import json, torch
from benchmarks import soak
from torch_max_backend import compile_stats
result = soak.run(calls=20)
s = compile_stats()
print(json.dumps({"wrong": result["wrong"], "compiles": s.max_compiles,
                  "from_disk": s.disk_cache_hits, "warm": s.warm_starts}))
"""


def _child(cache: Path) -> subprocess.Popen:
    env = dict(os.environ, MODULAR_DERIVED_PATH=str(cache))
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(child: subprocess.Popen) -> dict:
    out, err = child.communicate(timeout=900)
    assert child.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_two_processes_fill_one_empty_cache_and_a_third_compiles_nothing(tmp_path):
    # MAX's compiled-graph cache starts empty; its caches of compiled kernels
    # (gigabytes, shared by every graph) are the user's, as between any two
    # processes of one user.
    kernels = tmp_path / "cache"
    kernels.mkdir()
    for part in (".mojo_cache", ".mogg_cache"):
        if (cache_root() / part).is_dir():
            (kernels / part).symlink_to(cache_root() / part)
    first, second = _child(tmp_path), _child(tmp_path)
    for result in (_result(first), _result(second)):
        assert result["wrong"] == 0
    third = _result(_child(tmp_path))
    assert third["wrong"] == 0
    # Served whole from what the two left: a warm start, or MAX's disk cache.
    assert third["warm"] == 1 or third["compiles"] == third["from_disk"] == 1, third


def test_the_soak_command_reports_growth(capsys):
    reset_compile_stats()
    soak.main(["--calls", "50"])
    printed = capsys.readouterr().out
    assert "resident memory" in printed and "MiB" in printed
    assert compile_stats().max_compiles + compile_stats().cache_hits <= 1
