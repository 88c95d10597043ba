"""The FX passes run before lowering: once each on a graph's way through the
build, in their declared order, handing planning and the walk a frozen
record of what they found (lower/passes/)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from concurrent.futures import Future

import pytest
import torch

from torch_max_backend import FallbackWarning, max_backend
from torch_max_backend.lower import passes
from torch_max_backend.lower.builder import build_graph
from torch_max_backend.pipeline import compiling
from torch_max_backend.pipeline.graph_builds import GraphBuilds

from .aten_graphs import aten_graphs


@pytest.fixture
def entered(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each pass has run since the test began."""
    counts: Counter[str] = Counter()

    def counted(graph_pass: passes.GraphPass) -> passes.GraphPass:
        def run(gm: torch.fx.GraphModule, found: passes.GraphFindings) -> object:
            counts[graph_pass.name] += 1
            return graph_pass.run(gm, found)

        return dataclasses.replace(graph_pass, run=run)

    monkeypatch.setattr(passes, "PASSES", tuple(map(counted, passes.PASSES)))
    return counts


def _repeats_and_ranges(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    # The mask is built twice (the repeats pass merges it); gather and flip
    # index over positions, which a CPU graph takes from a runtime zero:
    # built a second time with that input (lower/index_origin.py).
    mask = torch.arange(x.shape[1]) < 5
    again = torch.arange(x.shape[1]) < 5
    picked = x.gather(1, index).sum() + x.flip(1)[:, :3].sum()
    return x.sin() * mask + x.sin() * again + picked


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randint(0, 8, (4, 2))


def test_rewrites_come_first_and_each_analysis_names_its_finding():
    names = [p.name for p in passes.PASSES]
    assert len(set(names)) == len(names)
    rewrites = [p.rewrites for p in passes.PASSES]
    assert rewrites == sorted(rewrites, reverse=True)
    fields = {f.name for f in dataclasses.fields(passes.GraphFindings)}
    assert {p.name for p in passes.PASSES if not p.rewrites} <= fields
    late = (passes.PASSES[-1], dataclasses.replace(passes.PASSES[0]))
    with pytest.raises(AssertionError, match="before every analysis"):
        passes._check_order(late)


def test_a_build_enters_each_pass_once_though_it_walks_the_graph_twice(entered):
    (gm,) = aten_graphs(_repeats_and_ranges, *_inputs())
    built = build_graph(gm)
    assert built.index_origin  # the walk ran a second time, with the origin
    assert entered == Counter({p.name: 1 for p in passes.PASSES})


def test_a_warm_start_and_a_build_share_one_analysis(entered):
    (gm,) = aten_graphs(_repeats_and_ranges, *_inputs())
    gm = passes.rewritten(gm)
    builds = GraphBuilds(gm, passes.ALL_OUTPUTS)
    found = builds.findings(gm)  # as a warm start asks before it plans
    assert builds.findings(gm) is found
    builds.build(gm)
    builds.with_matmuls().build(gm)  # a product upgrade's build
    analyses = [p.name for p in passes.PASSES if not p.rewrites]
    assert all(entered[name] == 1 for name in analyses), entered


def test_the_backend_enters_each_pass_once(entered, monkeypatch):
    def refused(*args: object, **kwargs: object) -> Future:
        failed: Future = Future()
        failed.set_exception(RuntimeError("not compiled in this test"))
        return failed

    # Planned, built, then refused by "MAX": the graph runs in PyTorch.
    monkeypatch.setattr(compiling, "compile_graph_async", refused)
    x, index = _inputs()
    compiled = torch.compile(_repeats_and_ranges, backend=max_backend)
    with pytest.warns(FallbackWarning):
        got = compiled(x, index)
    torch.testing.assert_close(got, _repeats_and_ranges(x, index))
    assert entered == Counter({p.name: 1 for p in passes.PASSES})


def test_the_findings_are_frozen():
    (gm,) = aten_graphs(_repeats_and_ranges, *_inputs())
    found = passes.analyzed(passes.rewritten(gm))
    assert found.constants.folded  # the masks are computed at planning
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.slot_writes = {}  # type: ignore[misc]
    node = next(iter(gm.graph.nodes))
    with pytest.raises(TypeError):
        found.constants.frontier[node] = torch.zeros(1)  # type: ignore[index]
