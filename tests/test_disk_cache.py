"""A corrupt MAX cache entry leads to a recompile, never a failed compile."""

from __future__ import annotations

import pytest
from max.engine import InferenceSession, Model
from max.graph import Graph

from torch_max_backend.runtime import session

LOADED = Model.__new__(Model)
GRAPH = Graph("empty", input_types=[])


class FlakySession(InferenceSession):
    """Fails the first load as MAX does on a cache file whose hash is wrong."""

    def __init__(self, blamed: str) -> None:  # no MAX session behind it
        self.blamed = blamed
        self.loads = 0

    def load(self, graph: Graph) -> Model:
        self.loads += 1
        if self.loads == 1:
            cause = RuntimeError(
                "corrupted file: stored hash and computed hash did not match "
                f"for file '{self.blamed}'"
            )
            raise RuntimeError("Failed to compile the model.") from cause
        return LOADED


def test_corrupt_entry_is_removed_and_the_graph_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(tmp_path))
    entry = tmp_path / "cache" / ".max_cache" / "mof" / "mef" / "entry"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"truncated")
    flaky = FlakySession(str(entry))
    with pytest.warns(RuntimeWarning, match="cache entry .*entry is corrupt"):
        assert session._load_healing_cache(flaky, GRAPH) is LOADED
    assert flaky.loads == 2
    assert not entry.exists()


def test_files_outside_max_cache_are_never_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(tmp_path / "elsewhere"))
    precious = tmp_path / "precious"
    precious.write_bytes(b"data")
    flaky = FlakySession(str(precious))
    with pytest.raises(RuntimeError, match="Failed to compile"):
        session._load_healing_cache(flaky, GRAPH)
    assert precious.exists()
    assert flaky.loads == 1
