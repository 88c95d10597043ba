"""The benchmark model zoo: small factories returning a model and its inputs.

Every model is built from a fixed seed with random weights, so that separate
processes build the very same model (compile benchmarks run each measurement
in a fresh process).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Case = tuple[nn.Module, tuple[torch.Tensor, ...]]


def mlp(batch: int = 64, hidden: int = 1024) -> Case:
    model = nn.Sequential(
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, 10),
    )
    return model, (torch.randn(batch, hidden),)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet18(nn.Module):
    """The ResNet-18 layout (torchvision is not installable here)."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        blocks: list[nn.Module] = []
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def resnet18(batch: int = 1, size: int = 224) -> Case:
    return ResNet18(), (torch.randn(batch, 3, size, size),)


class _LogitsOnly(nn.Module):
    """A transformers causal LM returning its logits tensor alone."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, use_cache=False).logits


def gpt2(layers: int = 12, batch: int = 1, seq: int = 128) -> Case:
    import transformers

    config = transformers.GPT2Config(n_layer=layers)
    model = _LogitsOnly(transformers.GPT2LMHeadModel(config))
    return model, (torch.randint(0, config.vocab_size, (batch, seq)),)


def gpt2_2layer() -> Case:
    return gpt2(layers=2, batch=1, seq=128)


ZOO: dict[str, Callable[[], Case]] = {
    "mlp": mlp,
    "resnet18": resnet18,
    "gpt2-2layer": gpt2_2layer,
    "gpt2": gpt2,
}


def build(name: str) -> Case:
    """The model ``name`` in eval mode, its weights drawn from seed 0."""
    if name not in ZOO:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(ZOO)}")
    torch.manual_seed(0)
    model, inputs = ZOO[name]()
    return model.eval(), inputs
