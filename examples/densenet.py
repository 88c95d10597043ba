"""Classify images with a DenseNet compiled by max_backend; top-5 checked against eager.

    python examples/densenet.py                     # DenseNet-121, 1x3x224x224
    python examples/densenet.py --layout densenet169 --batch 4
    python examples/densenet.py --layout densenet-shallow --width 8 --size 32  # quick

Random weights by default; --weights FILE loads a safetensors state dict of
this script's DenseNet (see examples/architectures.py for its parameter names).
"""

from __future__ import annotations

import sys

import classify
from architectures import DENSENET_LAYOUTS, DenseNet


def main(argv: list[str] | None = None) -> int:
    return classify.main(
        __doc__,
        lambda layout, width: DenseNet(layout, width=width),
        list(DENSENET_LAYOUTS),
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
