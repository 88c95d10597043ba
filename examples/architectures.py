"""Image classifiers in the layouts of VGG, ResNet and DenseNet.

torchvision cannot be installed here, so the examples and the benchmark zoo
define the architectures themselves. Each takes a ``width`` divisor so that
tests can run the same layout at a fraction of the channels.
"""

from __future__ import annotations

import torch
from torch import nn

# -- VGG -------------------------------------------------------------------------

# Output channels of each 3x3 convolution; "M" is a 2x2 max pool.
VGG_LAYOUTS: dict[str, list[int | str]] = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [
        *(64, 64, "M", 128, 128, "M", 256, 256, 256, "M"),
        *(512, 512, 512, "M", 512, 512, 512, "M"),
    ],
}


class VGG(nn.Module):
    def __init__(
        self,
        layout: str = "vgg11",
        classes: int = 1000,
        width: int = 1,
        pool: int = 7,
        batch_norm: bool = False,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for item in VGG_LAYOUTS[layout]:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
                continue
            cout = int(item) // width
            layers.append(nn.Conv2d(cin, cout, 3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(cout))
            layers.append(nn.ReLU(inplace=True))
            cin = cout
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(pool)
        hidden = 4096 // width
        self.classifier = nn.Sequential(
            nn.Linear(cin * pool * pool, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


# -- ResNet ----------------------------------------------------------------------


class BasicBlock(nn.Module):
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


# Basic blocks per stage.
RESNET_LAYOUTS: dict[str, tuple[int, int, int, int]] = {
    "resnet18": (2, 2, 2, 2),
    "resnet34": (3, 4, 6, 3),
}


class ResNet(nn.Module):
    def __init__(
        self, layout: str = "resnet18", classes: int = 1000, width: int = 1
    ) -> None:
        super().__init__()
        base = 64 // width
        self.stem = nn.Sequential(
            nn.Conv2d(3, base, 7, 2, 3, bias=False),
            nn.BatchNorm2d(base),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        blocks: list[nn.Module] = []
        cin = base
        for stage, count in enumerate(RESNET_LAYOUTS[layout]):
            cout = base * 2**stage
            for i in range(count):
                blocks.append(BasicBlock(cin, cout, 2 if stage and not i else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


# -- DenseNet --------------------------------------------------------------------


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (bottleneck), BN-ReLU-3x3 conv; output joins the input."""

    def __init__(self, cin: int, growth: int, bottleneck: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin),
            nn.ReLU(),
            nn.Conv2d(cin, bottleneck * growth, 1, bias=False),
            nn.BatchNorm2d(bottleneck * growth),
            nn.ReLU(),
            nn.Conv2d(bottleneck * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], 1)


# (growth rate, dense layers per block, channels of the stem)
DENSENET_LAYOUTS: dict[str, tuple[int, tuple[int, ...], int]] = {
    "densenet121": (32, (6, 12, 24, 16), 64),
    "densenet169": (32, (6, 12, 32, 32), 64),
    # Two dense layers per block: the same structure, quick to compile.
    "densenet-shallow": (32, (2, 2, 2, 2), 64),
}


class DenseNet(nn.Module):
    def __init__(
        self, layout: str = "densenet121", classes: int = 1000, width: int = 1
    ) -> None:
        super().__init__()
        growth, blocks, stem = DENSENET_LAYOUTS[layout]
        growth, channels = growth // width, stem // width
        layers: list[nn.Module] = [
            nn.Conv2d(3, channels, 7, 2, 3, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]
        for b, count in enumerate(blocks):
            for _ in range(count):
                layers.append(DenseLayer(channels, growth, bottleneck=4))
                channels += growth
            if b < len(blocks) - 1:  # a transition halves channels and size
                layers += [
                    nn.BatchNorm2d(channels),
                    nn.ReLU(),
                    nn.Conv2d(channels, channels // 2, 1, bias=False),
                    nn.AvgPool2d(2, 2),
                ]
                channels //= 2
        layers += [nn.BatchNorm2d(channels), nn.ReLU(), nn.AdaptiveAvgPool2d(1)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))
