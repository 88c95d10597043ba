"""Train an MLP and a small CNN on MNIST, eagerly and with max_backend, side by side.

    python examples/mnist_train.py                    # synthetic digits, both models
    python examples/mnist_train.py --data ~/mnist     # the real MNIST idx files
    python examples/mnist_train.py --model cnn --epochs 3

With ``--data DIR`` it reads MNIST's four idx files (optionally gzipped) from
DIR; without it, it trains on a synthetic, learnable ten-class dataset of
28x28 images, so that it runs offline. Both runs start from the same weights
and see the same batches; the script prints each epoch's mean loss and the
final test accuracy of both, and exits non-zero if the accuracies differ by
more than ``--tolerance`` points.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from common import load_weights
from tabulate import tabulate

from torch_max_backend import max_backend

IMAGE = 28
CLASSES = 10


# -- data ------------------------------------------------------------------------


def _read_idx(path: Path) -> torch.Tensor:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    _, _, dtype_code, ndim = struct.unpack(">BBBB", data[:4])
    if dtype_code != 0x08:
        raise ValueError(
            f"{path}: expected unsigned-byte idx data, got 0x{dtype_code:02x}"
        )
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    values = torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8)
    return values.reshape(shape)


def _find(directory: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (directory / name).exists():
            return directory / name
    raise FileNotFoundError(f"{directory}: no {stem} or {stem}.gz (MNIST idx files)")


def mnist(directory: Path) -> tuple[torch.Tensor, ...]:
    """(train images, train labels, test images, test labels) from idx files."""
    parts = []
    for prefix in ("train", "t10k"):
        images = _read_idx(_find(directory, f"{prefix}-images-idx3-ubyte"))
        labels = _read_idx(_find(directory, f"{prefix}-labels-idx1-ubyte"))
        parts += [images.float().div(255).unsqueeze(1), labels.long()]
    return tuple(parts)


def synthetic(train_size: int, test_size: int) -> tuple[torch.Tensor, ...]:
    """Ten classes, each a smooth random prototype; samples add shift and noise."""
    g = torch.Generator().manual_seed(1234)
    coarse = torch.rand(CLASSES, 1, 7, 7, generator=g)
    prototypes = F.interpolate(coarse, size=(IMAGE, IMAGE), mode="bilinear")

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.randint(0, CLASSES, (n,), generator=g)
        images = prototypes[labels] * (0.6 + 0.8 * torch.rand(n, 1, 1, 1, generator=g))
        # Heavy noise: about 90% test accuracy after 3 epochs, not a trivial 100%.
        images = images + 1.2 * torch.randn(n, 1, IMAGE, IMAGE, generator=g)
        return images.clamp(0, 1), labels

    return (*draw(train_size), *draw(test_size))


# -- models ----------------------------------------------------------------------


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(IMAGE * IMAGE, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, CLASSES),
    )


def cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 7 * 7, CLASSES),
    )


MODELS: dict[str, Callable[[], torch.nn.Module]] = {"mlp": mlp, "cnn": cnn}


# -- training --------------------------------------------------------------------


@dataclass
class Result:
    epoch_losses: list[float] = field(default_factory=list)
    accuracy: float = 0.0
    first_epoch_s: float = 0.0  # includes compiling
    later_epochs_s: float = 0.0


def run(
    model: torch.nn.Module,
    data: tuple[torch.Tensor, ...],
    args: argparse.Namespace,
    *,
    compiled: bool,
) -> Result:
    device = torch.device(args.device)
    model = model.to(device)
    train_x, train_y, test_x, test_y = (t.to(device) for t in data)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def predict(x: torch.Tensor) -> torch.Tensor:
        return model(x).argmax(1)

    if compiled:
        train_step = torch.compile(train_step, backend=max_backend)
        predict = torch.compile(predict, backend=max_backend)
    result = Result()
    order = torch.Generator().manual_seed(99)
    # Whole batches only: a smaller last batch would be a new shape to compile.
    steps = len(train_x) // args.batch_size
    for epoch in range(args.epochs):
        start = time.perf_counter()
        model.train()
        perm = torch.randperm(len(train_x), generator=order).to(device)
        total = torch.zeros((), device=device)
        for s in range(steps):
            idx = perm[s * args.batch_size : (s + 1) * args.batch_size]
            total += train_step(train_x[idx], train_y[idx])
        result.epoch_losses.append(total.item() / steps)
        seconds = time.perf_counter() - start
        if epoch == 0:
            result.first_epoch_s = seconds
        else:
            result.later_epochs_s += seconds
    model.eval()
    correct = 0
    with torch.no_grad():
        for s in range(0, len(test_x), args.batch_size):
            x, y = test_x[s : s + args.batch_size], test_y[s : s + args.batch_size]
            if len(x) < args.batch_size:  # pad to the compiled batch shape
                pad = args.batch_size - len(x)
                x = torch.cat([x, x.new_zeros(pad, *x.shape[1:])])
            correct += (predict(x)[: len(y)] == y).sum().item()
    result.accuracy = 100.0 * correct / len(test_x)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="directory with MNIST idx files")
    parser.add_argument("--model", choices=[*MODELS, "both"], default="both")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--train-size", type=int, default=6144, help="synthetic only")
    parser.add_argument("--test-size", type=int, default=1024, help="synthetic only")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument(
        "--tolerance", type=float, default=1.0, help="accuracy points allowed apart"
    )
    parser.add_argument(
        "--weights",
        type=Path,
        help="initial weights: a local safetensors file (with --model mlp or cnn)",
    )
    args = parser.parse_args(argv)
    if args.weights and args.model == "both":
        parser.error("--weights needs --model mlp or --model cnn")

    data = mnist(args.data) if args.data else synthetic(args.train_size, args.test_size)
    source = f"MNIST from {args.data}" if args.data else "synthetic digits"
    print(
        f"{source}: {len(data[0])} training and {len(data[2])} test images, "
        f"batch {args.batch_size}, {args.epochs} epoch(s), device {args.device}"
    )
    names = list(MODELS) if args.model == "both" else [args.model]
    agree = True
    for name in names:
        torch.manual_seed(0)
        model = MODELS[name]()
        load_weights(model, args.weights)
        eager = run(copy.deepcopy(model), data, args, compiled=False)
        ours = run(model, data, args, compiled=True)
        rows = [
            [epoch + 1, f"{e:.4f}", f"{m:.4f}"]
            for epoch, (e, m) in enumerate(
                zip(eager.epoch_losses, ours.epoch_losses, strict=True)
            )
        ]
        rows.append(["accuracy %", f"{eager.accuracy:.2f}", f"{ours.accuracy:.2f}"])
        rows.append(
            [
                "epoch 1 s",
                f"{eager.first_epoch_s:.2f}",
                f"{ours.first_epoch_s:.2f} (compiles)",
            ]
        )
        if args.epochs > 1:
            later = args.epochs - 1
            rows.append(
                [
                    "later epoch s",
                    f"{eager.later_epochs_s / later:.2f}",
                    f"{ours.later_epochs_s / later:.2f}",
                ]
            )
        print(f"\n{name}:")
        print(tabulate(rows, headers=["epoch", "eager loss", "max_backend loss"]))
        gap = abs(eager.accuracy - ours.accuracy)
        if gap > args.tolerance:
            agree = False
            print(f"{name}: accuracies differ by {gap:.2f} points (> {args.tolerance})")
    print("\nresult:", "eager and max_backend agree" if agree else "MISMATCH")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
