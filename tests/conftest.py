"""Shared fixtures: fresh Dynamo state per test, and proof that MAX ran."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from torch_max_backend.runtime.compiled_graph import CompiledGraph


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class MaxCalls:
    """Counts calls into compiled MAX graphs, by graph kind."""

    def __init__(self) -> None:
        self.names: list[str] = []

    @property
    def count(self) -> int:
        return len(self.names)

    def of(self, kind: str) -> int:
        return sum(1 for n in self.names if n.startswith(kind))


@pytest.fixture
def max_calls(monkeypatch: pytest.MonkeyPatch) -> MaxCalls:
    """Every call of a compiled MAX graph is recorded: tests assert MAX really ran."""
    calls = MaxCalls()
    original = CompiledGraph.__call__

    def counted(self: CompiledGraph, args: list) -> list:
        calls.names.append(self.name)
        return original(self, args)

    monkeypatch.setattr(CompiledGraph, "__call__", counted)
    return calls


@pytest.fixture(autouse=True)
def without_warm_starts(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every graph is built and compiled as if never seen before (no warm
    start from a record an earlier test or run left), so that tests see
    their lowerings run; tests of warm starts are marked ``warm_starts``."""
    if request.node.get_closest_marker("warm_starts"):
        return
    from torch_max_backend import backend

    monkeypatch.setattr(backend, "start_warm", lambda *args, **kwargs: None)
