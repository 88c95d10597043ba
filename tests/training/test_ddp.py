"""DistributedDataParallel and FSDP2 (fully_shard) over gloo, two processes,
model compiled with max_backend.

With a mean loss and equal shares, the averaged gradients equal the
gradients of one process on the whole batch, so parameters after N steps must
match a single-process eager run on the concatenated batches (FSDP2's
sharded parameters and gradients gathered whole first).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import ddp_case

WORLD = 2
HERE = Path(__file__).parent


# Longer than the workers' own hang deadline, which prints their stacks first.
WORKER_TIMEOUT_S = 1000


def _output(worker: subprocess.Popen) -> str:
    try:
        return worker.communicate(timeout=WORKER_TIMEOUT_S)[0]
    except subprocess.TimeoutExpired:
        worker.kill()
        log = worker.communicate()[0]
        pytest.fail(
            f"DDP rank made no progress in {WORKER_TIMEOUT_S} s:\n{log[-8000:]}"
        )


@pytest.mark.skipif(not dist.is_gloo_available(), reason="no gloo backend")
@pytest.mark.parametrize("wrapper", ["ddp", "fsdp2"])
def test_two_gloo_processes_match_single_process(tmp_path, wrapper):
    # Each step's backward compiles before its first call, as in this
    # process (conftest.py), so that every step's backward runs on MAX.
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TORCH_MAX_BACKEND_BACKGROUND_COMPILE": "updates",
    }
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "ddp_worker.py"),
                str(r),
                str(WORLD),
                str(tmp_path),
                wrapper,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(WORLD)
    ]
    try:
        logs = [_output(w) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for rank, (w, log) in enumerate(zip(workers, logs, strict=True)):
        assert w.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"

    model = ddp_case.make_model()
    optimizer = ddp_case.make_optimizer(model.parameters())
    for x, y in ddp_case.batches():
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()

    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for rank, result in enumerate(results):
        # Forward and backward ran on MAX at every step, on every rank.
        assert result["max_calls"] >= 2 * ddp_case.STEPS, rank
        for name, p in model.named_parameters():
            torch.testing.assert_close(
                result["grads"][name],
                p.grad,
                rtol=1e-4,
                atol=1e-5,
                msg=lambda m, n=name, r=rank: f"rank {r} grad {n}: {m}",
            )
            torch.testing.assert_close(
                result["params"][name],
                p.detach(),
                rtol=1e-4,
                atol=1e-5,
                msg=lambda m, n=name, r=rank: f"rank {r} param {n}: {m}",
            )
