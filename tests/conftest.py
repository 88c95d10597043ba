"""Shared fixtures: fresh Dynamo state per test, and proof that MAX ran."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from torch_max_backend.lower.builder import BuiltGraph
from torch_max_backend.pipeline import graph_builds
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


class BuiltGraphs(list[tuple[torch.fx.GraphModule, BuiltGraph]]):
    """(ATen graph or block, the MAX graph built from it), in build order."""

    def ops(self) -> set[str]:
        """The ATen ops of every graph built."""
        return {
            str(n.target)
            for gm, _ in self
            for n in gm.graph.nodes
            if n.op == "call_function"
        }


@pytest.fixture
def built_graphs(monkeypatch: pytest.MonkeyPatch) -> BuiltGraphs:
    """Every graph the backend builds into a MAX graph during the test."""
    builds = BuiltGraphs()
    original = graph_builds.build_analyzed

    def recording(
        gm: torch.fx.GraphModule, *rest: object, **options: object
    ) -> BuiltGraph:
        built = original(gm, *rest, **options)
        builds.append((gm, built))
        return built

    monkeypatch.setattr(graph_builds, "build_analyzed", recording)
    return builds


@pytest.fixture
def graph_texts(built_graphs: BuiltGraphs) -> Callable[[], list[str]]:
    """The texts of the MAX graphs built so far in the test, in order."""
    return lambda: [str(built.graph) for _, built in built_graphs]


@pytest.fixture(autouse=True)
def fixed_product_rules(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Products and convolutions are built by the fixed rules, never by a
    timing: a graph's text (and so the compiled graphs the suite shares
    through MAX's cache) must not change with how busy the machine was when
    a shape was timed. Tests of the measured choice are marked
    ``measured_products``."""
    from torch_max_backend.lower import conv_choice, product_choice

    if request.node.get_closest_marker("measured_products"):
        product_choice.set_product_strategy("auto")
        conv_choice.set_conv_strategy("auto")
        yield
        return
    monkeypatch.setenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY", "rule")
    monkeypatch.setenv("TORCH_MAX_BACKEND_CONV_STRATEGY", "rule")
    product_choice.set_product_strategy("rule")
    conv_choice.set_conv_strategy("rule")
    yield
    product_choice.set_product_strategy("rule")
    conv_choice.set_conv_strategy("rule")


@pytest.fixture(autouse=True)
def without_product_upgrades(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No graph compiles its matmul version in the background (each would be
    a MAX compile of about 70 s on a cold cache, for graphs whose checks are
    done); tests of upgrades are marked ``product_upgrades``."""
    if request.node.get_closest_marker("product_upgrades"):
        monkeypatch.delenv("TORCH_MAX_BACKEND_UPGRADE_PRODUCTS", raising=False)
        return
    monkeypatch.setenv("TORCH_MAX_BACKEND_UPGRADE_PRODUCTS", "0")


@pytest.fixture(autouse=True)
def updates_compile_before_their_call(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Graphs that only update their inputs (optimizer steps) and training
    steps' backward graphs compile before their first call returns, as the
    others do, unless ``background_compile`` is True: tests see their
    lowerings run at that call. Tests of the default (such graphs run in
    PyTorch until compiled) are marked ``background_updates``."""
    if request.node.get_closest_marker("background_updates"):
        return
    from torch_max_backend import backend

    monkeypatch.setattr(
        backend,
        "compiles_in_background",
        lambda gm, kind, settings: settings.background_compile is True,
    )


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


@pytest.fixture(autouse=True)
def count_max_compiles(request: pytest.FixtureRequest) -> Iterator[None]:
    """Record how many MAX graphs each test compiled or loaded from MAX's disk
    cache: with an empty cache each is a real compile (15-60 s), so these
    counts say where the suite's cold time goes (printed at the end)."""
    from torch_max_backend import compile_stats

    before = compile_stats()
    yield
    after = compile_stats()
    # A test that reset the statistics counted from zero.
    reset = after.max_compiles < before.max_compiles
    graphs = after.max_compiles - (0 if reset else before.max_compiles)
    if graphs:
        request.node.user_properties.append(("max_graphs", graphs))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # The fixture records in its teardown, so the teardown reports carry it.
    counts = [
        (value, report.nodeid)
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "teardown"
        for key, value in report.user_properties
        if key == "max_graphs"
    ]
    if not counts:
        return
    counts.sort(key=lambda c: (-c[0], c[1]))
    write = terminalreporter.write_line
    terminalreporter.section("MAX graphs per test (each a compile on an empty cache)")
    write(f"{sum(g for g, _ in counts)} graphs in {len(counts)} tests; the most:")
    for graphs, nodeid in counts[:25]:
        write(f"{graphs:4d}  {nodeid}")
