"""Each example's smallest configuration runs, and its own check against eager holds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

EXAMPLES = Path(__file__).parent.parent / "examples"


def _load(name: str) -> ModuleType:
    # Examples import their shared helpers as ``from common import ...``.
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
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


def test_gemma3_decoder_matches_eager(max_calls, capsys):
    gemma = _load("gemma3_decoder")
    # The example's default (smallest) model, so that a run of the example and
    # the test share MAX's compiled graph in its disk cache.
    code = gemma.main(["--runs", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert (
        "result: Gemma 3 logits and greedy next tokens: eager and max_backend agree"
        in out
    )
    assert "2 layers (1 sliding, 1 full" in out
    assert "4 query / 2 key-value heads" in out
    # The first call, median_ms's warm-up and one timed run, each a single
    # whole MAX graph (no split around ops running in PyTorch).
    assert max_calls.count == 3
    assert all(n.startswith("inference_") and "." not in n for n in max_calls.names)


def test_generate_matches_eager_with_one_decode_graph(max_calls, capsys):
    example = _load("generate")
    new_tokens = 4
    code = example.main(["--runs", "1", "--new-tokens", str(new_tokens)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert (
        "result: greedy tokens and one decode graph: eager and max_backend agree" in out
    )
    assert "(1 MAX graph(s) for the decode step" in out
    assert "later generate() calls: 0 MAX compile(s)" in out
    assert "tokens/s (prefill included): eager" in out
    # Every decode step (the prefill runs eagerly) of the first generation,
    # median_ms's warm-up and one timed generation ran the same MAX graph.
    assert max_calls.of("inference") == 3 * (new_tokens - 1)
    assert len(set(max_calls.names)) == 1


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        ("vgg", ["--width", "16", "--size", "32"]),
        ("resnet", ["--width", "8", "--size", "32"]),
        ("densenet", ["--layout", "densenet-shallow", "--width", "8", "--size", "32"]),
    ],
)
def test_image_classifier_top5_matches_eager(name, argv, max_calls, capsys):
    example = _load(name)
    code = example.main([*argv, "--runs", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "top-5 classes of every image: eager and max_backend agree" in out
    # The first call, the warm-up and the timed call ran one MAX graph each.
    assert max_calls.of("inference") == 3


def test_example_weights_file_is_loaded_and_checked(tmp_path, capsys):
    from safetensors.torch import save_file

    architectures = _load("architectures")
    model = architectures.ResNet("resnet18", width=8)
    state = {
        k: torch.full_like(v, 0.5) if v.is_floating_point() else v
        for k, v in model.state_dict().items()
    }
    path = tmp_path / "resnet.safetensors"
    save_file(state, str(path))
    common = _load("common")
    fresh = architectures.ResNet("resnet18", width=8)
    common.load_weights(fresh, path)
    assert all(
        torch.all(v == 0.5)
        for v in fresh.state_dict().values()
        if v.is_floating_point()
    )
    with pytest.raises(SystemExit, match=r"does not fit VGG; missing \['classifier"):
        common.load_weights(architectures.VGG("vgg11", width=16, pool=1), path)
    with pytest.raises(SystemExit, match="no such file"):
        common.load_weights(fresh, tmp_path / "absent.safetensors")


def test_tied_weights_may_be_saved_once(tmp_path):
    import transformers
    from safetensors.torch import save_file

    common = _load("common")
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    saved = transformers.GPT2LMHeadModel(config)
    # As published checkpoints do: the output head is the embedding, kept once.
    state = {k: v for k, v in saved.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(tmp_path / "gpt2.safetensors"))
    model = transformers.GPT2LMHeadModel(config)
    common.load_weights(model, tmp_path / "gpt2.safetensors")
    torch.testing.assert_close(model.lm_head.weight, saved.transformer.wte.weight)


def test_custom_mojo_op_eager_compiled_and_trained(max_calls, capsys):
    example = _load("custom_op_no_graph_break")
    code = example.main(["--runs", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Dynamo: 1 graph(s), 0 graph break(s)" in out
    for check in ("eager op", "compiled", "gradients", "no graph break"):
        assert f"  {check}: ok" in out
    # The model's graphs ran on MAX (inference, training forward and backward),
    # with the kernel inside them: strict mode allows no PyTorch fallback.
    assert max_calls.of("inference") >= 1
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
