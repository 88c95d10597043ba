"""Classify images with a ResNet compiled by max_backend; top-5 checked against eager.

    python examples/resnet.py                       # ResNet-18, 1x3x224x224
    python examples/resnet.py --layout resnet34 --batch 4
    python examples/resnet.py --width 4 --size 64   # a narrow, quick variant

Random weights by default; --weights FILE loads a safetensors state dict of
this script's ResNet (see examples/architectures.py for its parameter names).
"""

from __future__ import annotations

import sys

import classify
from architectures import RESNET_LAYOUTS, ResNet


def main(argv: list[str] | None = None) -> int:
    return classify.main(
        __doc__,
        lambda layout, width: ResNet(layout, width=width),
        list(RESNET_LAYOUTS),
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
