"""The graphs that time forms: those no process compiled before compile
together as one module, each is kept as an artifact, and a later process
loads it from there, compiling only the graphs it still lacks."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from max.driver import Buffer
from max.dtype import DType
from max.engine import Model
from max.graph import DeviceRef, Graph, Module, TensorType

from torch_max_backend.kernels import timing_graphs
from torch_max_backend.storage import artifacts


def _adding(value: int) -> tuple[str, timing_graphs.Build]:
    """A timing graph's stand-in: ``x + value``, named after ``value``."""
    name = f"timing_graphs_test_add_{value}"

    def build(module: Module | None) -> Graph:
        cpu = DeviceRef.CPU()
        with Graph(
            name, input_types=[TensorType(DType.float32, ["n"], cpu)], module=module
        ) as graph:
            graph.output(graph.inputs[0].tensor + value)
        return graph

    return name, build


def _checked(models: dict, values: dict[str, int]) -> None:
    x = torch.arange(5, dtype=torch.float32)
    assert sorted(models) == sorted(values)
    for name, value in values.items():
        (out,) = models[name]._execute_device_tensors([Buffer.from_dlpack(x)])
        torch.testing.assert_close(torch.from_dlpack(out), x + value)


@pytest.fixture
def compiles(monkeypatch, tmp_path) -> list[list[str]]:
    """The graphs of each compile of the timing session, in an empty
    artifact directory of the test's own (MAX's own cache stays)."""
    monkeypatch.setattr(artifacts, "own_cache_dir", lambda: tmp_path)
    session = timing_graphs.timing_session()
    seen: list[list[str]] = []
    real = session.compile

    def spy(model, **kwargs):
        seen.append(model.top_level_graph_names())
        return real(model, **kwargs)

    monkeypatch.setattr(session, "compile", spy)
    return seen


def test_lacking_graphs_compile_as_one_module_then_load_from_artifacts(compiles):
    graphs = dict(_adding(v) for v in (1, 2, 3))
    models = timing_graphs.load_timing_graphs(graphs)
    assert compiles == [list(graphs)]
    _checked(models, {name: v for name, v in zip(graphs, (1, 2, 3), strict=True)})
    paths = [artifacts.timing_artifact_path(str(b(None))) for b in graphs.values()]
    assert all(p.is_file() for p in paths)
    # Machine-bound: never among the artifacts a bundle carries.
    assert not set(paths) & set(artifacts.used_artifacts())

    # A later process: the graphs compiled before load from their artifacts,
    # whichever module they were compiled in; only the new one compiles.
    compiles.clear()
    name_2, build_2 = _adding(2)
    name_4, build_4 = _adding(4)
    again = timing_graphs.load_timing_graphs({name_2: build_2, name_4: build_4})
    assert compiles == [[name_4]]
    _checked(again, {name_2: 2, name_4: 4})


def test_graphs_that_do_not_compile_together_compile_each_alone(compiles, monkeypatch):
    session = timing_graphs.timing_session()
    spied = session.compile
    graphs = dict(_adding(v) for v in (4, 5, 6))
    first, second, refused = graphs

    def refusing(model, **kwargs):
        names = model.top_level_graph_names()
        if len(names) > 1 or names == [refused]:
            compiles.append(names)
            raise RuntimeError("refused for the test")
        return spied(model, **kwargs)

    monkeypatch.setattr(session, "compile", refusing)
    # A graph asked for as optional (a form's other layout) that fails alone
    # is left out; the others are still compiled, each alone.
    models = timing_graphs.load_timing_graphs(graphs, optional=[refused])
    assert compiles == [[first, second, refused], [first], [second], [refused]]
    _checked(models, {first: 4, second: 5})
    assert not timing_graphs.timing_artifact_path(str(graphs[refused](None))).exists()
    # Asked for as needed, its failure is the caller's.
    with pytest.raises(RuntimeError, match="refused for the test"):
        timing_graphs.load_timing_graphs({refused: graphs[refused]})


def test_a_product_form_comes_with_its_other_weight_layout(monkeypatch):
    """A training step's backward reads the forward's weights the other way:
    the forms a timing lacks are loaded with their other layout's graphs."""
    from torch_max_backend.kernels import product_timing

    asked: list[list[str]] = []

    def loading(builds, optional=()):
        asked.append(sorted(builds))
        assert sorted(optional) == [
            "product_timing_matmul_kn_bfloat16",
            "product_timing_summed_kn_bfloat16",
        ]
        return {name: mock.Mock(spec=Model) for name in builds}

    monkeypatch.setattr(product_timing, "_models", {})
    monkeypatch.setattr(product_timing, "load_timing_graphs", loading)
    forms = ["matmul", "summed", "row_sums"]
    models = product_timing._models_of(forms, True, torch.bfloat16, 3)
    assert sorted(models) == sorted(forms)
    assert asked == [
        [
            f"product_timing_{form}_{layout}_bfloat16"
            for form, layout in [
                ("matmul", "kn"),
                ("matmul", "nk"),
                ("row_sums", "nk"),
                ("summed", "kn"),
                ("summed", "nk"),
            ]
        ]
    ]
    # The backward's timing then finds them loaded.
    product_timing._models_of(["matmul", "summed"], False, torch.bfloat16, 5)
    assert len(asked) == 1
