"""PyTorch's OpenMP threads sleep after a parallel region once a CPU graph
is compiled, instead of spinning beside MAX's kernels (runtime/torch_threads.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# A parallel PyTorch op, then 10 ms for "a MAX graph", 100 times; prints the
# CPU time (clock ticks) every thread but the main one used meanwhile.
_LOOP = textwrap.dedent(
    """
    import os, sys, time, torch
    from torch_max_backend.runtime import torch_threads

    def others():
        main, total = str(os.getpid()), 0
        for tid in os.listdir("/proc/self/task"):
            if tid != main:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
        return total

    torch.set_num_threads(2)
    x = torch.randn(1 << 20)
    parked = torch_threads.quiet() if sys.argv[1] == "quiet" else False
    y = x * 2
    before = others()
    for _ in range(100):
        y = x * 2
        time.sleep(0.01)
    print(parked, others() - before)
    """
)


def _spin_ticks(mode: str, **env: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", _LOOP, mode],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    parked, ticks = done.stdout.split()
    return parked, int(ticks)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_torch_threads_stop_spinning_once_quieted():
    _, spinning = _spin_ticks("default")
    parked, quiet = _spin_ticks("quiet")
    assert parked == "True"
    # By default a worker spins milliseconds after each op: most of the 1 s.
    assert spinning >= 20, spinning
    assert quiet * 4 <= spinning, (quiet, spinning)


def test_a_users_wait_policy_is_left_alone():
    parked, _ = _spin_ticks("quiet", OMP_WAIT_POLICY="ACTIVE")
    assert parked == "False"


def test_the_setting_and_its_variable(monkeypatch):
    from torch_max_backend.settings import Settings

    assert Settings.resolve().quiet_torch_threads
    assert not Settings.resolve({"quiet_torch_threads": False}).quiet_torch_threads
    monkeypatch.setenv("TORCH_MAX_BACKEND_QUIET_TORCH_THREADS", "0")
    assert not Settings.resolve().quiet_torch_threads
