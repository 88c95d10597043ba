"""compile_stats(): graphs built, MAX compiles and in-process cache hits."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest
import torch

import torch_max_backend
from torch_max_backend import compile_stats, max_backend, reset_compile_stats
from torch_max_backend.runtime import module_batch, session
from torch_max_backend.runtime.compile_workers import copy_outcome, finish_unfinished

# What building and compiling count: no graph may start warm (test_warm_start.py).
pytestmark = pytest.mark.usefixtures("without_warm_starts")


def _simple_math(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y * 2


def test_same_structure_twice_compiles_once(max_calls):
    reset_compile_stats()
    assert compile_stats() == torch_max_backend.CompileStats()
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(
        torch.compile(_simple_math, backend=max_backend)(x, y), x + y * 2
    )
    first = compile_stats()
    assert first.graphs_built == 1
    assert first.max_compiles + first.cache_hits == 1
    assert first.build_seconds > 0
    # Dynamo forgets everything; the same MAX graph is then served from this
    # process's table: a new graph built, no new MAX compile.
    torch._dynamo.reset()
    torch.testing.assert_close(
        torch.compile(_simple_math, backend=max_backend)(x, y), x + y * 2
    )
    second = compile_stats()
    assert second.graphs_built == 2
    assert second.max_compiles == first.max_compiles
    assert second.cache_hits == first.cache_hits + 1
    assert max_calls.of("inference") == 2
    reset_compile_stats()
    assert compile_stats().graphs_built == 0


def test_second_model_of_same_architecture_is_a_cache_hit(max_calls):
    def mlp() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
        ).eval()

    torch.manual_seed(0)
    first, second = mlp(), mlp()  # same architecture, different weights
    x = torch.randn(3, 8)
    reset_compile_stats()
    with torch.no_grad():
        for model in (first, second):
            torch.testing.assert_close(
                torch.compile(model, backend=max_backend)(x), model(x)
            )
        # Parameters are inputs of Dynamo's graph too: Dynamo reuses the
        # first model's compiled code for the second, compiling nothing.
        assert compile_stats().graphs_built == 1
        once = compile_stats().max_compiles
        # A fresh Dynamo builds the graph again; weights are MAX graph inputs,
        # not constants, so it is the first model's MAX graph: a cache hit.
        torch._dynamo.reset()
        torch.testing.assert_close(
            torch.compile(second, backend=max_backend)(x), second(x)
        )
    stats = compile_stats()
    assert stats.graphs_built == 2
    assert stats.cache_hits == 1
    assert stats.max_compiles == once
    assert max_calls.of("inference") == 3


def _earlier_compiles_finished() -> None:
    """Wait for compiles an earlier test in this process left running (a
    graph built and never called still compiles: minutes on an empty cache),
    so that ``pending`` counts this test's graphs alone."""
    finish_unfinished()
    deadline = time.monotonic() + 30  # their completion callbacks settle last
    while compile_stats().pending and time.monotonic() < deadline:
        time.sleep(0.05)
    assert compile_stats().pending == 0, "an earlier compile never settled"


def _one_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's gathered graphs compile as one MAX module, whatever they hold.
    With two or more compile workers, graphs without MAX's matmul (these
    tests') compile each alone, side by side (``compile_groups``): then the
    backward is rightly pending while its own compile runs, which the
    forward's first call does not wait for (the test below)."""
    monkeypatch.setattr(module_batch, "compile_groups", lambda requests, _: [requests])


def test_a_training_graph_called_forward_only_leaves_nothing_pending(monkeypatch):
    # The step's backward compiles in one MAX module with its forward: once
    # the forward has run, nothing is pending, backward() called or not.
    _one_module(monkeypatch)
    _earlier_compiles_finished()

    def product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).sin()

    x = torch.randn(3, 4, requires_grad=True)
    y = torch.randn(3, 4)
    compiled = torch.compile(product, backend=max_backend)
    out = compiled(x, y)
    assert compile_stats().pending == 0
    out.sum().backward()
    assert compile_stats().pending == 0
    torch.testing.assert_close(x.grad, (x * y).cos().detach() * y)


def test_nothing_is_pending_once_a_first_call_has_its_graph(monkeypatch):
    # A compile's done callbacks run on the pool's thread after the waiting
    # caller has woken: on an empty cache they came late enough for the
    # caller to see its own finished compile (and its backward's, compiled
    # in one module with it) still pending. Here they come 2 s late.
    # (A graph loaded from our saved artifacts compiles nothing: this test
    # tells only on a cache that lacks its graph.)
    _one_module(monkeypatch)
    _earlier_compiles_finished()

    class LateCallbacks(Future):
        def __init__(self, future: Future) -> None:
            super().__init__()
            self._future = future

        def done(self) -> bool:
            return self._future.done()

        def add_done_callback(self, fn) -> None:
            self._future.add_done_callback(
                lambda _: threading.Timer(2.0, fn, (self,)).start()
            )

    # And each graph of a module loads slowly (on an empty cache, seconds):
    # the forward's caller woke while its backward was still loading.
    write = torch_max_backend.runtime.session.write_artifact
    monkeypatch.setattr(
        torch_max_backend.runtime.session,
        "write_artifact",
        lambda *a: (time.sleep(1.0), write(*a))[1],
    )
    real = torch_max_backend.pipeline.deferred.when_all_done
    monkeypatch.setattr(
        torch_max_backend.backend,
        "when_all_done",
        lambda futures, callback: real([LateCallbacks(f) for f in futures], callback),
    )

    def product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).cos()

    x = torch.randn(3, 4, requires_grad=True)
    y = torch.randn(3, 4)
    out = torch.compile(product, backend=max_backend)(x, y)
    assert compile_stats().pending == 0
    out.sum().backward()
    assert compile_stats().pending == 0
    torch.testing.assert_close(x.grad, -(x * y).sin().detach() * y)
    time.sleep(2.5)  # the late callbacks change nothing more
    assert compile_stats().pending == 0


def test_a_backward_compiled_alone_is_pending_until_its_compile_ends(monkeypatch):
    # A step's forward and backward compiled each by itself (compile_groups
    # does so for graphs without MAX's matmul when two workers are free):
    # the forward's first call waits for the forward alone, and the
    # backward counts as pending until its own compile is over. Its compile
    # is held here until the forward has run (on an empty cache it can
    # simply take longer than the forward's). No saved artifact may answer
    # for either graph: both go to MAX's compiler.
    _earlier_compiles_finished()
    monkeypatch.setattr(session, "read_artifact", lambda *args: None)
    monkeypatch.setattr(
        module_batch, "compile_groups", lambda requests, _: [[r] for r in requests]
    )
    release = threading.Event()
    started: list[Future] = []
    start = module_batch.start_compile

    def held_after_the_first(session, graph, device) -> Future:
        compiling = start(session, graph, device)
        started.append(compiling)
        if len(started) == 1:  # the forward, handed over first
            return compiling
        held: Future = Future()
        compiling.add_done_callback(
            lambda done: threading.Thread(
                target=lambda: (release.wait(120), copy_outcome(done, held))
            ).start()
        )
        return held

    monkeypatch.setattr(module_batch, "start_compile", held_after_the_first)

    def product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).sin()

    # A shape of its own: no model this process already holds answers.
    x = torch.randn(5, 7, requires_grad=True)
    y = torch.randn(5, 7)
    out = torch.compile(product, backend=max_backend)(x, y)
    assert len(started) == 2, "forward and backward were not compiled each alone"
    assert compile_stats().pending == 1
    release.set()
    out.sum().backward()  # its first call waits for its compile
    assert compile_stats().pending == 0
    torch.testing.assert_close(x.grad, (x * y).cos().detach() * y)
