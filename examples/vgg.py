"""Classify images with a VGG network compiled by max_backend; top-5 checked against eager.

    python examples/vgg.py                          # VGG-11, 1x3x224x224
    python examples/vgg.py --layout vgg16 --batch 4
    python examples/vgg.py --width 8 --size 64      # a narrow, quick variant

Random weights by default; --weights FILE loads a safetensors state dict of
this script's VGG (torchvision's VGG keys, features.* and classifier.*).
"""

from __future__ import annotations

import sys

import classify
from architectures import VGG, VGG_LAYOUTS


def main(argv: list[str] | None = None) -> int:
    def build(layout: str, width: int) -> VGG:
        # Images of 32 px and less end the features at 1x1: pool to that.
        return VGG(layout, width=width, pool=7 if width == 1 else 1)

    return classify.main(__doc__, build, list(VGG_LAYOUTS), argv)


if __name__ == "__main__":
    sys.exit(main())
