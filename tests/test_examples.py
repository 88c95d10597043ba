"""Each example's smallest configuration runs, and its own check against eager holds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).parent.parent / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"example_{name}", EXAMPLES / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_mnist_train_mlp_matches_eager(max_calls, capsys):
    mnist = _load("mnist_train")
    # Default batch size: the same graphs as a default run of the example.
    code = mnist.main(
        [
            "--model",
            "mlp",
            "--epochs",
            "2",
            "--train-size",
            "1024",
            "--test-size",
            "256",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "eager and max_backend agree" in out
    assert "accuracy %" in out
    # Training steps and the evaluation ran on MAX.
    assert max_calls.of("backward") == 2 * 1024 // 128
    assert max_calls.of("inference") >= 256 // 128


def _write_idx(
    path: Path, values: bytes, shape: tuple[int, ...], code: int = 0x08
) -> None:
    import struct

    header = struct.pack(">BBBB", 0, 0, code, len(shape))
    header += struct.pack(f">{len(shape)}I", *shape)
    path.write_bytes(header + values)


def test_mnist_idx_files_are_read(tmp_path):
    import gzip

    import pytest
    import torch

    mnist = _load("mnist_train")
    pixels = bytes(range(256)) * (2 * 28 * 28 // 256) + bytes(2 * 28 * 28 % 256)
    for prefix in ("train", "t10k"):
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte", pixels, (2, 28, 28))
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", bytes([3, 7]), (2,))
    # Gzipped files are found too.
    gz = tmp_path / "t10k-labels-idx1-ubyte"
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(gz.read_bytes()))
    gz.unlink()
    train_x, train_y, _, test_y = mnist.mnist(tmp_path)
    assert train_x.shape == (2, 1, 28, 28) and train_x.dtype == torch.float32
    assert train_x.max() == 1.0 and train_x.min() == 0.0
    assert train_y.tolist() == test_y.tolist() == [3, 7]
    _write_idx(tmp_path / "train-labels-idx1-ubyte", bytes(8), (2,), code=0x0D)
    with pytest.raises(
        ValueError, match="train-labels-idx1-ubyte: expected unsigned-byte"
    ):
        mnist.mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match="no train-images-idx3-ubyte"):
        mnist.mnist(tmp_path / "missing")
