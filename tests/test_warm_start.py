"""Warm starts: an ATen graph compiled before runs from its record and saved
artifact without building its MAX graph; its constants come from the graph
in hand; a record that is unreadable, stale or no longer fits is set aside
and the graph built as usual."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from torch_max_backend import compile_stats, max_backend, reset_compile_stats
from torch_max_backend.pipeline import warm_start as warm_start_module
from torch_max_backend.runtime import session
from torch_max_backend.runtime.model_table import ModelTable

pytestmark = pytest.mark.warm_starts


def _layer(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w) * 0.5


def _inputs(rows: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    # The tests that damage a record use rows of their own: under xdist a
    # record another worker is reading must not be the one damaged.
    return torch.randn(rows, 8), torch.randn(8, 8)


def _run(fn, *args, **options):
    """``fn(*args)`` compiled afresh (Dynamo's caches reset), as in a new process."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=max_backend, options=options or None)
    return compiled(*args)


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The record paths the backend looked up or wrote, in order."""
    seen: list[Path] = []
    original = warm_start_module.record_path

    def spy(fingerprint: str, device: str) -> Path:
        path = original(fingerprint, device)
        seen.append(path)
        return path

    monkeypatch.setattr(warm_start_module, "record_path", spy)
    return seen


@pytest.fixture
def empty_table(monkeypatch: pytest.MonkeyPatch):
    """Forget the models this process loaded, as a new process would have."""
    return lambda: monkeypatch.setattr(session, "MODELS", ModelTable())


def test_a_graph_compiled_before_runs_without_a_build(max_calls, empty_table):
    x, w = _inputs()
    _run(_layer, x, w)  # built, or warm from an earlier run of the suite
    empty_table()
    reset_compile_stats()
    torch.testing.assert_close(_run(_layer, x, w), _layer(x, w))
    stats = compile_stats()
    assert stats.graphs_built == 0 and stats.warm_starts == 1
    # Read from the saved artifact: no MAX compile, no graph text.
    assert stats.max_compiles == stats.disk_cache_hits == 1
    assert max_calls.count == 2


def _rebuilt_masks(x: torch.Tensor) -> torch.Tensor:
    out = x
    for _ in range(2):
        # Each layer rebuilds the same mask: merged before it is planned.
        positions = torch.arange(x.shape[-1])
        out = torch.where(positions[:, None] >= positions[None, :], out, 0.0) * 2
    return out


def test_a_graph_with_repeats_merged_starts_warm(max_calls, empty_table):
    x = torch.randn(5, 5)
    _run(_rebuilt_masks, x)
    empty_table()
    reset_compile_stats()
    torch.testing.assert_close(_run(_rebuilt_masks, x), _rebuilt_masks(x))
    stats = compile_stats()
    assert stats.graphs_built == 0 and stats.warm_starts == 1


def _flipped(x: torch.Tensor) -> torch.Tensor:
    # flip gathers along index ranges: the graph has an index origin input.
    return torch.flip(x, [1]) * 2


def test_a_graph_with_an_index_origin_starts_warm(max_calls):
    x = torch.randn(3, 5)
    _run(_flipped, x)
    reset_compile_stats()
    torch.testing.assert_close(_run(_flipped, x), _flipped(x))
    stats = compile_stats()
    assert stats.graphs_built == 0 and stats.warm_starts == 1
    assert max_calls.count == 2


def _times(values: list[float]):
    constant = torch.tensor(values)

    def times(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * constant

    return times


def test_constants_come_from_the_graph_in_hand_not_from_the_record(max_calls):
    x = torch.randn(3, 2)
    _run(_times([1.0, 2.0]), x)
    reset_compile_stats()
    other = _times([-3.0, 5.0])  # the same ATen graph, another constant
    torch.testing.assert_close(_run(other, x), other(x))
    assert compile_stats().warm_starts == 1 and max_calls.count == 2


def test_training_steps_start_warm_forward_and_backward(max_calls):
    def step(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad()
        torch.compile(model, backend=max_backend)(x).pow(2).sum().backward()
        return [p.grad for p in model.parameters()]

    torch.manual_seed(0)
    model, x = torch.nn.Linear(6, 3), torch.randn(5, 6)
    torch._dynamo.reset()
    step(model, x)
    torch._dynamo.reset()
    reset_compile_stats()
    grads = step(model, x)
    model.zero_grad()
    model(x).pow(2).sum().backward()
    for got, want in zip(grads, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(got, want)
    stats = compile_stats()
    assert stats.graphs_built == 0 and stats.warm_starts == 2
    assert max_calls.of("forward") == 2 and max_calls.of("backward") == 2


def test_a_known_graph_under_background_compilation_starts_on_max(max_calls):
    x, w = _inputs()
    _run(_layer, x, w)
    reset_compile_stats()
    got = _run(_layer, x, w, background_compile=True)
    torch.testing.assert_close(got, _layer(x, w))
    stats = compile_stats()
    assert stats.warm_starts == 1 and stats.eager_calls == 0 and stats.pending == 0
    assert max_calls.count == 2


def test_an_unreadable_record_is_removed_and_the_graph_built(records):
    x, w = _inputs(rows=5)
    _run(_layer, x, w)
    path = records[-1]
    path.write_text("{not json")
    reset_compile_stats()
    torch.testing.assert_close(_run(_layer, x, w), _layer(x, w))
    stats = compile_stats()
    assert stats.warm_starts == 0 and stats.graphs_built == 1
    assert json.loads(path.read_text())["graph_key"]  # a good one written again


def test_a_record_from_before_few_row_sums_stopped_counting_is_rebuilt(records):
    # Such a record's "largest_sum" counted a decode step's attention, whose
    # graph would compile a matmul version for nothing: built once more.
    x, w = _inputs(rows=7)
    _run(_layer, x, w)
    path = records[-1]
    record = json.loads(path.read_text())
    record["largest_sum"] = record.pop("largest_upgradable_sum")
    path.write_text(json.dumps(record))
    reset_compile_stats()
    torch.testing.assert_close(_run(_layer, x, w), _layer(x, w))
    stats = compile_stats()
    assert stats.warm_starts == 0 and stats.graphs_built == 1
    assert "largest_upgradable_sum" in json.loads(path.read_text())


def test_a_record_whose_artifact_is_gone_is_forgotten(records, empty_table):
    x, w = _inputs(rows=6)
    _run(_layer, x, w)
    path = records[-1]
    record = json.loads(path.read_text())
    record["artifact"] = "0" * 64 + ".mef"  # no such file
    path.write_text(json.dumps(record))
    empty_table()
    reset_compile_stats()
    torch.testing.assert_close(_run(_layer, x, w), _layer(x, w))
    stats = compile_stats()
    assert stats.warm_starts == 0 and stats.graphs_built == 1
    assert json.loads(path.read_text())["artifact"] != record["artifact"]


def test_a_graph_recorded_whole_follows_torch_executed_ops(max_calls):
    x, w = _inputs()
    _run(_layer, x, w)
    reset_compile_stats()
    before = max_calls.count
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _run(_layer, x, w, torch_executed_ops=["aten.tanh"])
    torch.testing.assert_close(got, _layer(x, w))
    assert compile_stats().warm_starts == 0
    assert max_calls.count == before  # too small to split: all in PyTorch
