"""One rank of the data-parallel tests: a DDP or FSDP2 model compiled with max_backend.

Run as ``python ddp_worker.py RANK WORLD_SIZE OUT_DIR [ddp|fsdp2]``; it writes
``OUT_DIR/rank{RANK}.pt`` with the final parameters, gradients, losses and the
number of MAX graph calls. The model, data and steps come from ``ddp_case``
so that the single-process reference in the test uses the very same ones.
"""

from __future__ import annotations

import faulthandler
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).parent))
import ddp_case  # after the path set-up: this script runs outside the test package

from torch_max_backend import max_backend
from torch_max_backend.runtime.compiled_graph import CompiledGraph

# A rank that makes no progress prints every thread's stack and exits, so a
# hang shows where it is instead of running into the test's own timeout.
HANG_DEADLINE_S = 900
# A collective waiting longer than this fails in gloo with the rank it waited
# for; a cold-cache compile on the other rank takes minutes on 2 cores.
COLLECTIVE_TIMEOUT_S = 600


def _wrapped(model: torch.nn.Module, wrapper: str) -> torch.nn.Module:
    """DDP's replica, or FSDP2's ``fully_shard``: parameters sharded across
    the ranks as DTensors, gathered by its hooks around the compiled forward."""
    if wrapper == "ddp":
        return DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    return fully_shard(model)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded DTensor's whole value; a plain tensor as it is."""
    full = getattr(tensor, "full_tensor", None)
    return (full() if full is not None else tensor).detach()


def main(rank: int, world: int, out_dir: Path, wrapper: str) -> None:
    faulthandler.dump_traceback_later(HANG_DEADLINE_S, exit=True)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{out_dir / 'rendezvous'}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    calls = 0
    original = CompiledGraph.__call__

    def counted(self: CompiledGraph, args: list) -> list:
        nonlocal calls
        calls += 1
        return original(self, args)

    CompiledGraph.__call__ = counted  # type: ignore[method-assign]
    model = ddp_case.make_model()
    compiled = torch.compile(_wrapped(model, wrapper), backend=max_backend)
    optimizer = ddp_case.make_optimizer(model.parameters())
    losses = []
    for x, y in ddp_case.batches():
        # Each rank trains on its contiguous share of the global batch.
        x, y = x.chunk(world)[rank], y.chunk(world)[rank]
        optimizer.zero_grad()
        loss = F.mse_loss(compiled(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    torch.save(
        {
            "params": {n: _full(p) for n, p in model.named_parameters()},
            "grads": {n: _full(p.grad) for n, p in model.named_parameters()},
            "losses": losses,
            "max_calls": calls,
        },
        out_dir / f"rank{rank}.pt",
    )
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main(
        int(sys.argv[1]),
        int(sys.argv[2]),
        Path(sys.argv[3]),
        sys.argv[4] if len(sys.argv) > 4 else "ddp",
    )
