"""``background_compile="backward"`` (pipeline/update_graphs.py): a training
step's first call waits for its forward's compile alone; the backward runs in
PyTorch until its MAX graph, built from its first call, is loaded."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from torch_max_backend import backend
from torch_max_backend.pipeline import background, deferred
from torch_max_backend.pipeline.update_graphs import compiles_in_background
from torch_max_backend.settings import Settings

from .helpers import assert_same_training
from .test_background_updates import _compiled_and_eager, _graph


def _waiting(wait, called: threading.Event) -> threading.Thread:
    waiter = threading.Thread(target=wait, args=(called,))
    waiter.start()
    return waiter


def test_a_backward_builds_at_its_call_and_not_beside_a_forwards_compile(
    monkeypatch,
):
    monkeypatch.setattr(deferred, "FIRST_CALL_WAIT", 0.3)
    called = threading.Event()
    called.set()
    deferred.backward_turn(called)  # called: at once
    done = deferred.forward_compiling()
    waiter = _waiting(deferred.backward_turn, threading.Event())
    waiter.join(timeout=0.6)
    assert waiter.is_alive()  # its forward is still compiling
    done()
    waiter.join(timeout=5)  # never called: FIRST_CALL_WAIT later
    assert not waiter.is_alive()
    # A step split by a graph break: its second forward compiles while the
    # first backward waits for its call, which comes after that forward ran.
    second = deferred.forward_compiling()
    first_call = threading.Event()
    waiter = _waiting(deferred.backward_turn, first_call)
    waiter.join(timeout=0.8)
    assert waiter.is_alive()
    first_call.set()
    waiter.join(timeout=5)
    assert not waiter.is_alive()
    second()
    assert deferred.forwards_compiling() == 0


def test_only_the_backward_setting_sends_backward_graphs(monkeypatch):
    monkeypatch.delenv("TORCH_MAX_BACKEND_BACKGROUND_COMPILE", raising=False)
    model = _graph(returns=True)
    backward = Settings(background_compile="backward")
    assert compiles_in_background(model, "backward", backward)
    assert not compiles_in_background(model, "forward", backward)
    assert compiles_in_background(_graph(), "inference", backward)  # an update
    updates = Settings(background_compile="updates")
    assert not compiles_in_background(model, "backward", updates)
    assert compiles_in_background(model, "backward", Settings())  # the default
    assert not compiles_in_background(
        model, "backward", Settings(background_compile="backward", strict=True)
    )
    drawing = _graph(returns=True, random=True)
    assert not compiles_in_background(drawing, "backward", backward)
    monkeypatch.setenv("TORCH_MAX_BACKEND_BACKGROUND_COMPILE", "backward")
    assert Settings.resolve().background_compile == "backward"
    with pytest.raises(TypeError, match="'updates' or 'backward'"):
        Settings.resolve({"background_compile": "later"})


@pytest.mark.background_updates
def test_the_first_backward_runs_in_pytorch_then_every_graph_on_max(
    max_calls, monkeypatch
):
    monkeypatch.delenv("TORCH_MAX_BACKEND_BACKGROUND_COMPILE", raising=False)
    assert Settings.resolve().background_compile == "backward"  # the default
    compiles: dict[str, list[float]] = {}
    original = backend.start_max

    def timed(gm, builds, settings, name, *args):
        future = original(gm, builds, settings, name, *args)
        compiles[name] = [time.perf_counter()]
        future.add_done_callback(lambda _: compiles[name].append(time.perf_counter()))
        return future

    monkeypatch.setattr(backend, "start_max", timed)
    got, expected, eager_calls = _compiled_and_eager(4)
    # The first step's backward and update ran in PyTorch; once compiled,
    # every graph of the later steps ran on MAX.
    assert eager_calls == [2, 2, 2, 2]
    assert max_calls.of("forward") == 4
    assert max_calls.of("backward") == 3
    assert max_calls.of("inference") == 3
    assert_same_training(got, expected)
    (forward,) = [times for name, times in compiles.items() if "forward" in name]
    (backward,) = [times for name, times in compiles.items() if "backward" in name]
    assert backward[0] >= forward[1]  # its compile began once the forward's ended


def test_a_graph_run_in_pytorch_reads_maxs_contiguous_inputs_with_eagers_strides():
    # A backward run in PyTorch while its forward runs on MAX gets the saved
    # tensors contiguous, where eager's were strided: as_strided must read
    # them as eager's, not the contiguous copy's storage.
    graph = torch.fx.Graph()
    saved = graph.placeholder("saved")
    saved.meta["val"] = torch.empty(4, 3).t()  # eager saved a transpose
    read = graph.call_function(
        torch.ops.aten.as_strided.default, (saved, [3, 4], [1, 3], 0)
    )
    graph.output((read,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    eager_saved = torch.arange(12.0).reshape(4, 3).t()
    expected = gm(eager_saved)[0].clone()
    release = threading.Event()

    def refuse(copied: torch.fx.GraphModule):
        raise RuntimeError("not compiled in this test")

    switch = background.compile_in_background(
        "backward_t",
        gm,
        refuse,
        strict=False,
        verbose=False,
        after=lambda called: release.wait(),
    )
    try:
        (got,) = switch([eager_saved.contiguous()])  # as MAX hands it back
        torch.testing.assert_close(got, expected)
    finally:
        release.set()
        assert background.wait_compiled(timeout=60)
