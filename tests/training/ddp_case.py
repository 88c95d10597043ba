"""The model, optimizer and data shared by the DDP workers and the reference."""

from __future__ import annotations

from collections.abc import Iterable

import torch

STEPS = 3
GLOBAL_BATCH = 8


class Net(torch.nn.Module):
    # A model class of user code: DDP's forward is opaque to Dynamo, which
    # compiles the wrapped module's forward as its own frame; forwards in
    # torch.nn's own files (nn.Sequential) are not compiled that way.
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 24)
        self.norm = torch.nn.LayerNorm(24)
        self.fc2 = torch.nn.Linear(24, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Net()


def make_optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(5)
    return [
        (
            torch.randn(GLOBAL_BATCH, 10, generator=g),
            torch.randn(GLOBAL_BATCH, 3, generator=g),
        )
        for _ in range(STEPS)
    ]
