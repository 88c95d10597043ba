"""The image-classification example's flow, shared by vgg.py, resnet.py and densenet.py.

The model classifies a batch of random images eagerly and compiled with
max_backend; the check is that every image gets the same top-5 classes, in the
same order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from common import (
    load_weights,
    median_ms,
    parser,
    print_timings,
    timed_first_call,
    verdict,
)

from torch_max_backend import max_backend


def main(
    doc: str | None,
    build: Callable[[str, int], torch.nn.Module],
    layouts: list[str],
    argv: list[str] | None,
) -> int:
    p = parser(doc)
    p.add_argument("--layout", choices=layouts, default=layouts[0])
    p.add_argument(
        "--width", type=int, default=1, help="divide every layer's channels by this"
    )
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--size", type=int, default=224, help="image height and width")
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    model = build(args.layout, args.width)
    load_weights(model, args.weights)
    model = model.eval().to(device)
    images = torch.rand(args.batch, 3, args.size, args.size, device=device)
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{args.layout} (width 1/{args.width}, {params / 1e6:.2f}M parameters), "
        f"images {tuple(images.shape)} on {device}"
    )

    compiled = torch.compile(model, backend=max_backend)
    with torch.no_grad():
        logits, first_call_s = timed_first_call(lambda: compiled(images))
        expected = model(images)
        eager_ms = median_ms(lambda: model(images), args.runs, device)
        max_ms = median_ms(lambda: compiled(images), args.runs, device)

    ours, theirs = logits.topk(5).indices.cpu(), expected.topk(5).indices.cpu()
    for i in range(min(args.batch, 4)):
        print(f"image {i}: top-5 eager {theirs[i].tolist()}, max {ours[i].tolist()}")
    print(f"max abs logit difference: {(logits - expected).abs().max().item():.2e}")
    print_timings(eager_ms, max_ms, first_call_s)
    return verdict(torch.equal(ours, theirs), "top-5 classes of every image")
