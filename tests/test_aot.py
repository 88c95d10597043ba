"""Ahead-of-time export: a package that runs without the model code or torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from torch_max_backend.aot.runner import PackageError, load
from torch_max_backend.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """The zoo's 3-layer MLP exported with a dynamic batch, verified by the CLI."""
    out = tmp_path_factory.mktemp("aot") / "mlp.maxpkg"
    sys.path.insert(0, str(ROOT))
    try:
        code = main(
            [
                "export",
                "--model",
                "benchmarks.zoo:mlp",
                "--example-shape",
                "4,1024",
                "--dynamic",
                "0:0",
                "--output",
                str(out),
                "--verify",
            ]
        )
    finally:
        sys.path.remove(str(ROOT))
    assert code == 0
    return out


def _mlp() -> torch.nn.Module:
    from benchmarks.zoo import mlp

    torch.manual_seed(0)
    return mlp()[0].eval()


def test_package_matches_eager_at_several_batch_sizes(package, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"][1] == 1024
    assert isinstance(manifest["inputs"][0]["shape"][0], str)  # symbolic batch
    assert {w["name"] for w in manifest["weights"]} >= {"0.weight", "4.bias"}
    model, eager = load(package), _mlp()
    for batch in (1, 7, 33):
        x = np.random.default_rng(batch).standard_normal((batch, 1024), np.float32)
        result = model.run(x)
        with torch.no_grad():
            expected = eager(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(result.outputs[0], expected, rtol=1e-4, atol=1e-4)
        assert result.output_shapes == [(batch, 10)]
        assert result.latency_ms > 0 and result.memory_bytes > 2 * 1024 * 1024 * 4


_FRESH_RUN = """
import json, sys
from torch_max_backend.cli import main
code = main(["run", "--model", sys.argv[1], "--input", sys.argv[2],
             "--format", "json", "--iters", "3"])
print(json.dumps({"code": code, "torch": "torch" in sys.modules}))
"""


def test_run_in_a_fresh_process_never_imports_torch(package, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    x = np.random.default_rng(0).standard_normal((5, 1024), np.float32)
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_RUN, str(package), str(tmp_path / "x.npy")],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == {"code": 0, "torch": False}
    report = json.loads("\n".join(lines[:-1]))
    with torch.no_grad():
        expected = _mlp()(torch.from_numpy(x)).numpy()
    assert report["outputs"][0]["shape"] == [5, 10]
    assert report["outputs"][0]["mean"] == pytest.approx(
        float(expected.mean()), abs=1e-4
    )
    assert report["latency_ms"]["iters"] == 3


_FRESH_POLLER = """
import json, os, sys
import numpy as np
from torch_max_backend.aot.runner import load
from torch_max_backend.runtime import max_poller
model = load(sys.argv[1])
model.run(np.zeros((2, 1024), np.float32))
idled = max_poller.idled(timeout=60)
print(json.dumps({"idled": [os.sched_getscheduler(t) == os.SCHED_IDLE for t in idled],
                  "torch": "torch" in sys.modules}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE")
def test_the_runner_idles_max_s_polling_thread_too(package):
    """The runner, without torch, keeps MAX's poller off the cores as the
    backend does (runtime/max_poller.py)."""
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_POLLER, str(package)],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"idled": [True], "torch": False}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE")
def test_the_runner_leaves_the_poller_alone_when_the_setting_is_off(package):
    """TORCH_MAX_BACKEND_IDLE_MAX_POLLER=0 holds for the runner too."""
    env = {**os.environ, "TORCH_MAX_BACKEND_IDLE_MAX_POLLER": "0"}
    script = _FRESH_POLLER.replace("timeout=60", "timeout=2")
    done = subprocess.run(
        [sys.executable, "-c", script, str(package)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"idled": [], "torch": False}


def _copy(package: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "copy.maxpkg"
    shutil.copytree(package, target)
    return target


def _edit_manifest(path: Path, **changes: object) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(changes)
    (path / "manifest.json").write_text(json.dumps(manifest))


def _run_error(capsys, *args: str) -> str:
    assert main(["run", *args]) == 2
    return capsys.readouterr().err


def test_missing_package(tmp_path, capsys):
    err = _run_error(capsys, "--model", str(tmp_path / "nowhere"))
    assert "no package at" in err and "nowhere" in err


def test_foreign_directory(tmp_path, capsys):
    (tmp_path / "manifest.json").write_text("not json at all")
    err = _run_error(capsys, "--model", str(tmp_path))
    assert "manifest.json is not valid JSON" in err


@pytest.mark.parametrize(
    ("name", "keep", "message"),
    [
        ("graph.mef", 1000, "graph.mef cannot be loaded"),
        ("weights.safetensors", 500, "weights.safetensors cannot be read"),
    ],
)
def test_truncated_file(package, tmp_path, capsys, name, keep, message):
    pkg = _copy(package, tmp_path)
    part = pkg / name
    part.write_bytes(part.read_bytes()[:keep])
    err = _run_error(capsys, "--model", str(pkg))
    assert message in err


def test_weight_of_wrong_shape(package, tmp_path, capsys):
    from safetensors.numpy import load_file, save_file

    pkg = _copy(package, tmp_path)
    arrays = load_file(str(pkg / "weights.safetensors"))
    arrays["4.bias"] = np.zeros(11, np.float32)
    save_file(arrays, str(pkg / "weights.safetensors"))
    err = _run_error(capsys, "--model", str(pkg))
    assert "4.bias dim 0 must be 10" in err


def test_newer_format(package, tmp_path, capsys):
    pkg = _copy(package, tmp_path)
    _edit_manifest(pkg, format_version=99)
    err = _run_error(capsys, "--model", str(pkg))
    assert "package format 99, newer than" in err


def test_other_device_and_other_max_version(package, tmp_path, capsys):
    pkg = _copy(package, tmp_path)
    err = _run_error(capsys, "--model", str(pkg), "--device", "gpu")
    assert "was compiled for cpu, not gpu" in err
    _edit_manifest(pkg, max_version="0.0.1")
    err = _run_error(capsys, "--model", str(pkg))
    assert "compiled with MAX 0.0.1" in err


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros((2, 3, 1024), np.float32), "input_0 must have rank 2"),
        (np.zeros((2, 1000), np.float32), "input_0 dim 1 must be 1024"),
        (np.zeros((2, 1024), np.float64), "input_0 must be float32, got float64"),
    ],
)
def test_bad_inputs(package, tmp_path, capsys, array, message):
    np.save(tmp_path / "x.npy", array)
    err = _run_error(
        capsys, "--model", str(package), "--input", str(tmp_path / "x.npy")
    )
    assert message in err
    with pytest.raises(PackageError, match=message):
        load(package)(array)


def test_check_reports_health(package, capsys):
    assert main(["run", "--model", str(package), "--check", "--iters", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (
        report["ok"]
        and report["max_version"]
        and report["outputs"][0]["shape"]
        == [
            2,
            10,
        ]
    )


_FRESH_SIZES = """
import sys
import numpy as np
from torch_max_backend.aot.runner import load
model = load(sys.argv[1])
outputs = {}
for i, name in enumerate(sys.argv[2:]):
    outputs[f"out{i}"] = model(np.load(name))[0]
np.savez(sys.argv[1] + "-outputs.npz", **outputs)
assert "torch" not in sys.modules
"""


def _check_export(model, example, dynamic_shapes, sizes, out: Path, make) -> None:
    """Export, then run every size in one fresh process, against eager."""
    from torch_max_backend import export

    path = export(model, example, out, dynamic_shapes=dynamic_shapes)
    files, expected = [], []
    for i, size in enumerate(sizes):
        (inputs,) = make(size)
        with torch.no_grad():
            expected.append(model(inputs).numpy())
        files.append(str(out.parent / f"input{i}.npy"))
        np.save(files[-1], inputs.numpy())
    subprocess.run([sys.executable, "-c", _FRESH_SIZES, str(path), *files], check=True)
    got = np.load(str(path) + "-outputs.npz")
    for i, e in enumerate(expected):
        np.testing.assert_allclose(got[f"out{i}"], e, rtol=1e-4, atol=1e-4)


def test_small_cnn_with_dynamic_batch(tmp_path):
    torch.manual_seed(0)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 10),
    ).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    _check_export(
        cnn,
        (torch.randn(2, 3, 16, 16),),
        ({0: batch},),
        [1, 3, 8],
        tmp_path / "cnn.maxpkg",
        lambda b: [torch.randn(b, 3, 16, 16)],
    )


def test_gpt2_with_dynamic_batch_and_sequence(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4)
    gpt2 = transformers.GPT2LMHeadModel(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt2 = gpt2

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.gpt2(ids, use_cache=False).logits

    # GPT-2's code branches on batch == 1, so torch.export needs batch >= 2.
    batch = torch.export.Dim("batch", min=2, max=64)
    seq = torch.export.Dim("seq", min=2, max=512)
    _check_export(
        Logits().eval(),
        (torch.randint(0, 1000, (2, 16)),),
        ({0: batch, 1: seq},),
        [(2, 7), (3, 33), (4, 128)],
        tmp_path / "gpt2.maxpkg",
        lambda bs: [torch.randint(0, 1000, bs)],
    )


def test_debug_prints_statistics_and_timings(package, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_MAX_BACKEND_DEBUG", "1")
    assert main(["run", "--model", str(package), "--iters", "2"]) == 0
    err = capsys.readouterr().err
    assert "torch-max-backend: loaded" in err and " ms" in err
    assert "input input_0: float32[2, 1024] mean" in err
    assert "run 1:" in err and "output 0: float32[2, 10] mean" in err
    monkeypatch.setenv("TORCH_MAX_BACKEND_DEBUG", "maybe")
    assert main(["run", "--model", str(package)]) == 2
    assert "TORCH_MAX_BACKEND_DEBUG='maybe' is not a boolean" in capsys.readouterr().err


class _ReturnsItsTable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(4.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, self.table.clone()


def test_a_returned_weight_is_a_copy_the_caller_may_write(tmp_path):
    from torch_max_backend import export

    path = export(_ReturnsItsTable(), (torch.zeros(4),), tmp_path / "table.maxpkg")
    runner = load(path)
    first = runner(np.zeros(4, dtype=np.float32))
    np.testing.assert_array_equal(first[1], np.arange(4.0, dtype=np.float32))
    first[1][:] = -1.0
    second = runner(np.zeros(4, dtype=np.float32))
    np.testing.assert_array_equal(second[1], np.arange(4.0, dtype=np.float32))


class _Lookup(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(6, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


def test_a_package_refuses_an_index_out_of_range_as_eager_does(tmp_path):
    from torch_max_backend import export

    torch.manual_seed(0)
    model = _Lookup().eval()
    path = export(model, (torch.tensor([0, 5]),), tmp_path / "lookup.maxpkg")
    runner = load(path)
    (rows,) = runner(np.array([5, 1], dtype=np.int64))
    np.testing.assert_allclose(rows, model(torch.tensor([5, 1])).detach().numpy())
    with pytest.raises(IndexError, match=r"index out of bounds .* size 6"):
        runner(np.array([6, 1], dtype=np.int64))
