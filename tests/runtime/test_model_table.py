"""Process-wide tables stay bounded: loaded models, the compile log, the profile."""

from __future__ import annotations

import gc

import pytest
import torch

from torch_max_backend import max_backend
from torch_max_backend.runtime import profile, session
from torch_max_backend.runtime.model_table import BoundedLog, ModelTable


def test_least_recently_used_models_go_first():
    table: ModelTable[str] = ModelTable(capacity=2)
    for key in "abc":
        table.put(key, key.upper())
    assert list(table) == ["b", "c"] and table.evicted == 1
    assert table.get("b") == "B"  # now the most recently used
    table.put("d", "D")
    assert list(table) == ["b", "d"]
    assert table.get("a") is None


def test_models_in_use_are_kept_and_not_counted_until_released():
    table: ModelTable[str] = ModelTable(capacity=1)
    owners = []
    for key in "ab":
        table.put(key, key.upper())
        owners.append(table.hold(key))
    table.put("c", "C")
    table.put("d", "D")
    # a and b are run by live owners: kept, and outside the bound of one.
    assert list(table) == ["a", "b", "d"] and table.held() == 2
    del owners[0]
    gc.collect()
    # a is free now: the table trims to one entry besides b.
    assert list(table) == ["b", "d"] and table.held() == 1
    owners.clear()
    gc.collect()
    assert list(table) == ["d"] and table.held() == 0


def test_logs_keep_the_latest_entries():
    log: BoundedLog[int] = BoundedLog(capacity=3)
    for i in range(10):
        log.append(i)
    assert list(log) == [7, 8, 9] and log[-1] == 9 and len(log) == 3
    log.resize(2)
    assert list(log) == [8, 9]


def test_compiles_are_bounded_by_the_setting(monkeypatch):
    monkeypatch.setattr(session, "MODELS", ModelTable())
    monkeypatch.setattr(session, "COMPILE_LOG", BoundedLog())
    monkeypatch.setattr(profile, "PROFILE", BoundedLog())
    for i in range(5):
        session.MODELS.put(("stale", str(i)), object())

    def simple_math(x, y):  # test_backend's structure: a cache hit
        return x + y * 2

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    compiled = torch.compile(
        simple_math,
        backend=max_backend,
        options={"max_cached_graphs": 2, "profile": True},
    )
    torch.testing.assert_close(compiled(x, y), x + y * 2)
    # Two stale entries and the live graph's model, which is held.
    assert len(session.MODELS) == 3 and session.MODELS.held() == 1
    assert session.COMPILE_LOG.capacity == 2 and len(session.COMPILE_LOG) == 1
    assert profile.PROFILE.capacity == 2 and len(profile.PROFILE) == 1


def test_the_setting_is_checked(monkeypatch):
    from torch_max_backend.settings import Settings

    with pytest.raises(TypeError, match="max_cached_graphs' must be an int >= 1"):
        Settings.resolve({"max_cached_graphs": 0})
    monkeypatch.setenv("TORCH_MAX_BACKEND_MAX_CACHED_GRAPHS", "7")
    assert Settings.resolve({"max_cached_graphs": 3}).max_cached_graphs == 7
