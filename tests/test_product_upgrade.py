"""A graph compiled with summed products switches to MAX's matmul (pipeline/product_upgrade.py)."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import backend as backend_module
from torch_max_backend import compile_stats, reset_compile_stats, wait_compiled
from torch_max_backend.pipeline import product_upgrade, warm_start
from torch_max_backend.runtime.compile_workers import worker_count
from torch_max_backend.runtime.compiled_graph import CompiledGraph


def _model(width: int = 64) -> torch.nn.Module:
    """Over 32 rows: a 32 x 64 x 64 product (the upgrade's threshold) and a
    small one; ``width=16``: small products only."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 8)
    ).eval()


def _needs_workers() -> None:
    if worker_count() < 2:
        pytest.skip("upgrades compile in worker processes: this machine has one")


@pytest.mark.product_upgrades
def test_a_summed_graph_switches_to_matmul_and_records_it(monkeypatch, graph_texts):
    _needs_workers()
    remembered = []
    real_remember = product_upgrade.remember

    def remember(*args, **kwargs):
        remembered.append((args[1].largest_upgradable_sum, kwargs))
        real_remember(*args, **kwargs)

    monkeypatch.setattr(product_upgrade, "remember", remember)
    graphs: list[CompiledGraph] = []
    first_models = []
    init = CompiledGraph.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        graphs.append(self)
        first_models.append(self._run[0].__self__)

    monkeypatch.setattr(CompiledGraph, "__init__", keep)
    model, x = _model(), torch.randn(32, 64)
    expected = model(x)
    reset_compile_stats()
    compiled = torch.compile(model, backend="max")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), expected)  # on the sums
        assert wait_compiled(timeout=900)
        assert compile_stats().product_upgrades == 1
        # The compiled callable runs the graph's new model.
        (graph,) = graphs
        execute, _ = graph._run
        assert execute.__self__ is not first_models[0]
        runs = []
        graph._run = (lambda inputs: runs.append(1) or execute(inputs), None)
        torch.testing.assert_close(compiled(x), expected)  # on the matmul
        assert runs == [1]
    first, upgraded = graph_texts()
    assert "rmo.matmul" not in first
    assert upgraded.count("rmo.matmul") == 2
    assert remembered == [(0, {"replace": True})]

    # A later compile of the same graph starts warm on the matmul version
    # its record now names, and upgrades nothing.
    monkeypatch.setattr(backend_module, "start_warm", warm_start.start_warm)
    torch._dynamo.reset()  # else Dynamo reuses the graph it has
    again = torch.compile(_model(), backend="max")
    with torch.no_grad():
        torch.testing.assert_close(again(x), expected)
        assert wait_compiled(timeout=900)
    stats = compile_stats()
    assert (stats.warm_starts, stats.product_upgrades) == (1, 1)


@pytest.mark.product_upgrades
def test_no_upgrade_when_turned_off(graph_texts):
    _needs_workers()
    model, x = _model(), torch.randn(32, 64)
    reset_compile_stats()
    compiled = torch.compile(model, backend="max", options={"upgrade_products": False})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        assert wait_compiled(timeout=60)
    assert compile_stats().product_upgrades == 0
    assert len(graph_texts()) == 1


@pytest.mark.product_upgrades
def test_small_sums_stay(graph_texts):
    model, x = _model(16), torch.randn(32, 16)
    reset_compile_stats()
    compiled = torch.compile(model, backend="max")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        assert wait_compiled(timeout=60)
    assert compile_stats().product_upgrades == 0
    (text,) = graph_texts()
    assert "rmo.matmul" not in text
