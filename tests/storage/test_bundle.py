"""Artifact bundles: a round trip makes zero real MAX compiles in a fresh
process; corrupted, truncated and foreign bundles are refused with a reason,
and the cache they were to go into is left as it was."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from torch_max_backend import load_artifacts, max_backend, save_artifacts
from torch_max_backend.cli import main as cli
from torch_max_backend.storage.bundle import BundleWarning


def _math(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y * 2


_FRESH = """
import json, sys, torch
import torch_max_backend as tmb
print("installed", tmb.load_artifacts(sys.argv[1]), file=sys.stderr)
fn = torch.compile(lambda x, y: x + y * 2, backend="max")
x, y = torch.randn(3, 4), torch.randn(3, 4)
torch.testing.assert_close(fn(x, y), x + y * 2)
s = tmb.compile_stats()
print(json.dumps([s.max_compiles, s.disk_cache_hits, s.graphs_built, s.warm_starts]))
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle of what this process compiled: the graph of ``_math``."""
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(
        torch.compile(_math, backend=max_backend)(x, y), _math(x, y)
    )
    path = tmp_path_factory.mktemp("bundle") / "graphs.tar.gz"
    saved = save_artifacts(path)
    assert saved.artifacts >= 1 and saved.path == path and path.is_file()
    return path


def _cache_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_fresh_process_with_empty_caches_compiles_nothing(bundle, tmp_path):
    env = dict(os.environ, MODULAR_DERIVED_PATH=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", _FRESH, str(bundle)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    max_compiles, disk_hits, built, warm = counts
    assert max_compiles == disk_hits == 1
    # The graph's record came too: its MAX graph was not even built.
    assert built == 0 and warm == 1
    # MAX's compiler never ran: its own cache stayed empty.
    assert not _cache_files(tmp_path / "cache" / ".max_cache")


def _rewrite(bundle: Path, out: Path, *, manifest=None, content=None) -> Path:
    """A copy of ``bundle`` with its manifest or first file's bytes changed."""
    with tarfile.open(bundle, "r:gz") as tar, tarfile.open(out, "w:gz") as new:
        for info in tar:
            data = tar.extractfile(info).read()
            if info.name == "manifest.json" and manifest:
                meta = json.loads(data)
                manifest(meta)
                data = json.dumps(meta).encode()
            elif info.name != "manifest.json" and content:
                data, content = content(data), None
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))
    return out


def _foreign_max(meta):
    meta["max"] = "0.0.1"


def _foreign_cpu(meta):
    meta["targets"]["cpu"] = "riscv64 some other CPU"


def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("truncated", "damaged or truncated"),
        ("garbage", "damaged or truncated"),
        ("corrupted", "corrupted \\(checksum differs\\)"),
        ("foreign max", "compiled with max 0.0.1, this process runs max"),
        ("foreign cpu", "compiled for cpu target 'riscv64 some other CPU'"),
        ("missing", "no such file"),
    ],
)
def test_a_bundle_that_cannot_be_used_is_refused_with_its_reason(
    bundle, tmp_path, monkeypatch, damage, reason
):
    bad = tmp_path / "bad.tar.gz"
    if damage == "truncated":
        bad.write_bytes(bundle.read_bytes()[: bundle.stat().st_size // 2])
    elif damage == "garbage":
        bad.write_bytes(b"not a bundle at all" * 100)
    elif damage == "corrupted":
        _rewrite(bundle, bad, content=_flip)
    elif damage == "foreign max":
        _rewrite(bundle, bad, manifest=_foreign_max)
    elif damage == "foreign cpu":
        _rewrite(bundle, bad, manifest=_foreign_cpu)
    cache = tmp_path / "cache_root"
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(cache))
    existing = cache / "cache" / "torch_max_backend" / "kept.txt"
    existing.parent.mkdir(parents=True)
    existing.write_text("the user's")
    before = _cache_files(cache)
    with pytest.warns(BundleWarning, match=reason):
        assert load_artifacts(bad) == 0
    assert _cache_files(cache) == before


def test_cache_pack_and_unpack_carry_the_whole_cache(tmp_path, monkeypatch, capsys):
    source, target = tmp_path / "source", tmp_path / "target"
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(source))
    from torch_max_backend.storage.cache_dir import own_cache_dir

    graph = own_cache_dir() / "cpu" / "abc.mef"
    kernel = own_cache_dir() / "kernels" / "d1" / "lib.mojoc"
    for path in (graph, kernel):
        path.parent.mkdir(parents=True)
        path.write_bytes(os.urandom(64))
    (own_cache_dir() / "cpu" / ".half.partial").write_bytes(b"in the making")
    packed = tmp_path / "all.tar.gz"
    assert cli(["cache", "pack", str(packed)]) == 0
    assert "packed 1 compiled graph(s) and 1 kernel file(s)" in capsys.readouterr().out
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(target))
    assert cli(["cache", "unpack", str(packed)]) == 0
    assert "installed 1 compiled graph(s)" in capsys.readouterr().out
    assert (own_cache_dir() / "cpu" / "abc.mef").read_bytes() == graph.read_bytes()
    assert (own_cache_dir() / "kernels" / "d1" / "lib.mojoc").is_file()
    assert not (own_cache_dir() / "cpu" / ".half.partial").exists()
    # A second unpack keeps what is there and installs nothing new.
    assert cli(["cache", "unpack", str(packed)]) == 0
    assert "installed 0 compiled graph(s)" in capsys.readouterr().out
    packed.write_bytes(packed.read_bytes()[:100])
    assert cli(["cache", "unpack", str(packed)]) == 1
    assert "cannot unpack" in capsys.readouterr().err
    assert cli(["cache", "--clear"]) == 0
    assert not (own_cache_dir() / "cpu" / "abc.mef").exists()
