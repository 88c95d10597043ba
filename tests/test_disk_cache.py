"""Disk caches: a corrupt or truncated entry leads to a recompile, never a
failed compile or a wrong result; a second process loads instead of compiling."""

from __future__ import annotations

import pytest
import torch
from max.engine import InferenceSession
from max.engine.api import CompiledModel
from max.graph import Graph

from torch_max_backend.runtime import session
from torch_max_backend.runtime.model_table import ModelTable

COMPILED = CompiledModel.__new__(CompiledModel)
GRAPH = Graph("empty", input_types=[])
# Compile workers take CPU graphs only; a graph for any other device compiles
# in this process, through the session given.
IN_PROCESS = torch.device("cuda")


class FlakySession(InferenceSession):
    """Fails the first load as MAX does on a cache file whose hash is wrong."""

    def __init__(self, blamed: str) -> None:  # no MAX session behind it
        self.blamed = blamed
        self.loads = 0

    def compile(self, graph: Graph) -> CompiledModel:
        self.loads += 1
        if self.loads == 1:
            cause = RuntimeError(
                "corrupted file: stored hash and computed hash did not match "
                f"for file '{self.blamed}'"
            )
            raise RuntimeError("Failed to compile the model.") from cause
        return COMPILED


def test_corrupt_entry_is_removed_and_the_graph_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(tmp_path))
    entry = tmp_path / "cache" / ".max_cache" / "mof" / "mef" / "entry"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"truncated")
    flaky = FlakySession(str(entry))
    with pytest.warns(RuntimeWarning, match="cache entry .*entry is corrupt"):
        healed = session._compile_healing_cache(flaky, GRAPH, IN_PROCESS)
        assert healed.result() is COMPILED
    assert flaky.loads == 2
    assert not entry.exists()


def test_files_outside_max_cache_are_never_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(tmp_path / "elsewhere"))
    precious = tmp_path / "precious"
    precious.write_bytes(b"data")
    flaky = FlakySession(str(precious))
    with pytest.raises(RuntimeError, match="Failed to compile"):
        session._compile_healing_cache(flaky, GRAPH, IN_PROCESS).result()
    assert precious.exists()
    assert flaky.loads == 1


_CHILD = """
import json, torch
from torch_max_backend import compile_stats, max_backend
fn = torch.compile(lambda x, y: x + y * 2, backend=max_backend)
x, y = torch.randn(3, 4), torch.randn(3, 4)
torch.testing.assert_close(fn(x, y), x + y * 2)
s = compile_stats()
print(json.dumps([s.max_compiles, s.disk_cache_hits]))
"""


def test_a_second_process_loads_the_graph_from_max_disk_cache():
    # Weights and scalars are graph inputs and names are stable, so a new
    # process builds the very same graph text and MAX serves it from disk.
    import json
    import subprocess
    import sys

    def child() -> list[int]:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    child()  # compiles it, unless an earlier run already did
    assert child() == [1, 1]


def test_a_truncated_saved_graph_is_compiled_again(
    tmp_path, monkeypatch, max_calls, without_warm_starts
):
    import warnings

    import torch

    from torch_max_backend import compile_stats, max_backend, reset_compile_stats

    saved = tmp_path / "graph.mef"
    monkeypatch.setattr(session, "artifact_path", lambda text, device: saved)

    def run_fresh() -> torch.Tensor:
        # As a new process would: nothing loaded, nothing traced.
        monkeypatch.setattr(session, "MODELS", ModelTable())
        torch._dynamo.reset()
        x, y = torch.randn(3, 4), torch.randn(3, 4)
        got = torch.compile(lambda a, b: a + b * 2, backend=max_backend)(x, y)
        torch.testing.assert_close(got, x + y * 2)
        return got

    run_fresh()
    whole = saved.read_bytes()
    assert len(whole) > 1000
    saved.write_bytes(whole[: len(whole) // 3])  # a crash mid-write
    reset_compile_stats()
    with pytest.warns(RuntimeWarning, match="graph.mef cannot be loaded"):
        run_fresh()
    assert compile_stats().max_compiles == 1  # handed to MAX again
    assert saved.read_bytes() == whole  # and saved again, whole
    reset_compile_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_fresh()
    assert compile_stats().disk_cache_hits == 1  # read back from the artifact
    assert max_calls.of("inference") == 3
