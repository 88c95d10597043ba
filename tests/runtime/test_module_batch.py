"""Graphs asked for together compile as one MAX module (with several compile
workers, those holding a MAX matmul; the others each by itself while workers
are spare); graphs that cannot be merged, or a module MAX refuses, compile
one by one instead."""

from __future__ import annotations

import copy
from concurrent.futures import Future

import numpy as np
import pytest
import torch
from max.driver import Buffer
from max.dtype import DType
from max.engine.api import read
from max.graph import DeviceRef, Graph, TensorType

from torch_max_backend import FallbackWarning, max_backend
from torch_max_backend.runtime import module_batch
from torch_max_backend.runtime import session as session_module
from torch_max_backend.runtime.session import graph_key, session_for
from torch_max_backend.storage.artifacts import read_artifact, write_artifact

CPU = torch.device("cpu")


def _graph(scale: bool) -> Graph:
    kind = TensorType(DType.float32, [3, 5], device=DeviceRef.CPU())
    with Graph("torch_max_graph", input_types=[kind]) as graph:
        (x,) = graph.inputs
        graph.output(x.tensor * 3.0 if scale else x.tensor - 4.0)
    return graph


def _start(graph: Graph) -> Future:
    text = str(graph)
    return module_batch.start_gathered(
        session_for(CPU), graph, text, CPU, graph_key(text)
    )


@pytest.fixture
def one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gathered graphs grouped as for one compile worker: all in one module."""
    monkeypatch.setattr(module_batch, "worker_count", lambda: 1)


@pytest.fixture
def module_compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every module handed to MAX's compiler."""
    sizes: list[int] = []
    original = module_batch.start_module_compile

    def counted(session, module, libraries, device):
        sizes.append(len(module.top_level_graph_names()))
        return original(session, module, libraries, device)

    monkeypatch.setattr(module_batch, "start_module_compile", counted)
    return sizes


def test_graphs_started_together_compile_as_one_module(
    module_compiles, one_worker, tmp_path
):
    scale, shift = _graph(True), _graph(False)
    with module_batch.gathered():
        futures = [_start(scale), _start(shift)]
        assert not any(f.done() for f in futures)  # held until the block ends
    members = [f.result(timeout=600) for f in futures]
    assert module_compiles == [2]
    assert members[0].compiled is members[1].compiled
    session = session_for(CPU)
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    expected = [x * 3.0, x - 4.0]
    for member, want in zip(members, expected, strict=True):
        (got,) = member.init(session).execute(Buffer.from_numpy(x))
        np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-6)
    # The artifact saved for one graph is the whole module; it is found by
    # the graph's own name when read back.
    path = tmp_path / "shift.mef"
    write_artifact(members[1].compiled, path)
    assert len(session.init_all(read(path))) == 2
    model = read_artifact(session, path, members[1].name)
    (got,) = model.execute(Buffer.from_numpy(x))
    np.testing.assert_allclose(got.to_numpy(), x - 4.0, rtol=1e-6)


def _symbolic_graph(dims: list[str], scale: float) -> Graph:
    kind = TensorType(DType.float32, dims, device=DeviceRef.CPU())
    with Graph("torch_max_graph", input_types=[kind]) as graph:
        (x,) = graph.inputs
        graph.output(x.tensor * scale)
    return graph


def test_graphs_with_symbolic_sizes_compile_as_one_module(module_compiles, one_worker):
    # A graph's symbolic sizes are parameters of its name in its text
    # (``mo.graph @torch_max_graph<rows, cols>(``): renamed inside the module,
    # each graph keeps them (a dynamic-shape step's forward and backward).
    graphs = [_symbolic_graph(["rows"], 3.0), _symbolic_graph(["rows", "cols"], -2.0)]
    with module_batch.gathered():
        futures = [_start(g) for g in graphs]
    members = [f.result(timeout=600) for f in futures]
    assert module_compiles == [2]
    assert members[0].compiled is members[1].compiled
    session = session_for(CPU)
    rng = np.random.default_rng(1)
    for shape in [(4,), (7,)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = members[0].init(session).execute(Buffer.from_numpy(x))
        np.testing.assert_allclose(got.to_numpy(), x * 3.0, rtol=1e-6)
    for shape in [(2, 3), (5, 1)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = members[1].init(session).execute(Buffer.from_numpy(x))
        np.testing.assert_allclose(got.to_numpy(), x * -2.0, rtol=1e-6)


def _fake_compiles(monkeypatch: pytest.MonkeyPatch, module_fails: bool) -> list:
    """Replace MAX's compiler by futures: alone compiles give their graph's
    text; a module compile fails or gives the module."""
    calls: list = []

    def alone(session, graph, device):
        calls.append(("alone", str(graph)))
        done: Future = Future()
        done.set_result(str(graph))
        return done

    def together(session, module, libraries, device):
        calls.append(("module", len(module.top_level_graph_names())))
        done: Future = Future()
        if module_fails:
            done.set_exception(RuntimeError("MAX refused the module"))
        else:
            done.set_result("module")
        return done

    monkeypatch.setattr(module_batch, "start_compile", alone)
    monkeypatch.setattr(module_batch, "start_module_compile", together)
    return calls


def test_a_module_max_refuses_compiles_each_graph_alone(monkeypatch, one_worker):
    calls = _fake_compiles(monkeypatch, module_fails=True)
    graphs = [_graph(True), _graph(False)]
    with module_batch.gathered():
        futures = [_start(g) for g in graphs]
    assert [f.result() for f in futures] == [str(g) for g in graphs]
    assert calls == [
        ("module", 2),
        ("alone", str(graphs[0])),
        ("alone", str(graphs[1])),
    ]


def test_graphs_that_do_not_merge_compile_alone(monkeypatch, one_worker):
    calls = _fake_compiles(monkeypatch, module_fails=False)
    graphs = [_graph(True), _graph(False)]
    with module_batch.gathered():
        first = _start(graphs[0])
        # A text that is not one MAX graph cannot be merged.
        odd = module_batch.start_gathered(
            session_for(CPU), graphs[1], "not a graph", CPU, "odd"
        )
    assert first.result() == str(graphs[0]) and odd.result() == str(graphs[1])
    assert [kind for kind, _ in calls] == ["alone", "alone"]


def test_one_graph_and_no_gathering_compile_alone(monkeypatch):
    calls = _fake_compiles(monkeypatch, module_fails=False)
    graph = _graph(True)
    assert _start(graph).result() == str(graph)  # no gathering under way
    with module_batch.gathered():
        single = _start(graph)
        with module_batch.alone():
            direct = _start(graph)
        assert direct.done() and not single.done()
    assert single.result() == str(graph)
    assert [kind for kind, _ in calls] == ["alone", "alone", "alone"]


def test_the_blocks_of_a_split_graph_compile_as_one_module(
    module_compiles, one_worker, monkeypatch, max_calls
):
    # Past the artifacts saved by an earlier run, so that the blocks reach
    # the compiler (whose own cache answers at once when warm).
    monkeypatch.setattr(session_module, "read_artifact", lambda *a, **k: None)

    def fn(x: torch.Tensor) -> torch.Tensor:
        a = torch.sin(x) * 2 + torch.cos(x) - x / 3 + 1.5
        b = torch.cumsum(a, dim=1)  # runs in PyTorch, between two MAX blocks
        return torch.tanh(b) * 0.5 - b.abs() + torch.exp(-b) * 2 + 0.25

    options = {"torch_executed_ops": ["aten.cumsum"], "min_block_size": 3}
    compiled = torch.compile(fn, backend=max_backend, options=options)
    x = torch.randn(4, 6)
    with pytest.warns(FallbackWarning, match="cumsum"):
        torch.testing.assert_close(compiled(x), fn(x))
    assert module_compiles == [2]
    assert max_calls.count == 2


@pytest.mark.parametrize("workers", [1, 2])
def test_a_training_step_s_forward_and_backward_compile_together(
    workers, module_compiles, monkeypatch, max_calls, without_warm_starts
):
    # Default mode: the backward is handed over with the forward and both
    # compile before the first call returns: as one module for one worker;
    # for two each by itself, side by side (their products are summed: no
    # MAX matmul to share).
    monkeypatch.setattr(module_batch, "worker_count", lambda: workers)
    monkeypatch.setattr(session_module, "read_artifact", lambda *a, **k: None)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)
    )
    reference = copy.deepcopy(model)
    x = torch.randn(4, 6)
    torch.compile(model, backend=max_backend)(x).square().sum().backward()
    assert module_compiles == ([2] if workers == 1 else [])
    reference(x).square().sum().backward()
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1


def _request(text: str) -> module_batch._Request:
    # Only the text decides the grouping; the graph is a stand-in.
    return module_batch._Request(session_for(CPU), _graph(True), text, CPU, text)


_MATMUL = "%2 = rmo.matmul(%0, %1)"
_SUMMED = "%2 = rmo.mul(%0, %1)"


@pytest.mark.parametrize(
    ("workers", "texts", "expected"),
    [
        (1, ["m1", "s1"], [["m1", "s1"]]),
        (2, ["s1", "s2"], [["s1"], ["s2"]]),
        (2, ["m1", "m2"], [["m1", "m2"]]),
        (2, ["m1", "s1"], [["m1"], ["s1"]]),
        (2, ["m1", "s1", "s2"], [["m1"], ["s1", "s2"]]),
        (2, ["s1", "s2", "s3"], [["s1", "s2", "s3"]]),
        (3, ["s1", "s2", "s3"], [["s1"], ["s2"], ["s3"]]),
        (2, ["s1"], [["s1"]]),
    ],
)
def test_graphs_with_a_max_matmul_share_a_module_the_others_spread(
    monkeypatch, workers, texts, expected
):
    monkeypatch.setattr(module_batch, "worker_count", lambda: workers)
    body = {"m": _MATMUL, "s": _SUMMED}
    requests = [_request(f"{body[t[0]]} // {t}") for t in texts]
    groups = module_batch.compile_groups(requests, CPU)
    assert [[r.text.split("// ")[1] for r in g] for g in groups] == expected


def test_graphs_for_a_gpu_compile_as_one_module(monkeypatch):
    # GPU graphs compile in this process, one at a time: one module always.
    monkeypatch.setattr(module_batch, "worker_count", lambda: 2)
    requests = [_request(_SUMMED), _request(_SUMMED + " ")]
    assert module_batch.compile_groups(requests, torch.device("cuda")) == [requests]
