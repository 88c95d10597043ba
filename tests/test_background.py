"""Background compilation: calls run in PyTorch until the MAX graph is ready,
then on MAX, both matching eager; failures stay on PyTorch (or raise, strict)."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import Future

import pytest
import torch
from torch._functorch.aot_autograd import make_boxed_func

from torch_max_backend import (
    FallbackWarning,
    MaxCompilerError,
    compile_stats,
    max_backend,
    reset_compile_stats,
    wait_compiled,
)
from torch_max_backend import backend as backend_module
from torch_max_backend.pipeline import background, compiling

BACKGROUND = {"background_compile": True}
# What happens while a graph compiles: no graph may start warm.
pytestmark = pytest.mark.usefixtures("without_warm_starts")


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Holds every background compile until the test opens the gate, so that
    the calls before the switch surely run in PyTorch."""
    opened = threading.Event()
    compile_now = backend_module._start_compile

    def held(*args, **kwargs):
        assert opened.wait(120), "the test never opened the gate"
        return compile_now(*args, **kwargs)

    monkeypatch.setattr(backend_module, "_start_compile", held)
    yield opened
    opened.set()
    wait_compiled(timeout=600)


def _math(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2 + y).sum(dim=1) - y.mean()


def test_calls_run_in_pytorch_until_the_switch_then_on_max(gate, max_calls):
    reset_compile_stats()
    fn = torch.compile(_math, backend=max_backend, options=BACKGROUND)
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    for _ in range(2):
        torch.testing.assert_close(fn(x, y), _math(x, y))
    before = compile_stats()
    assert before.eager_calls == 2 and before.pending == 1
    assert max_calls.count == 0
    assert wait_compiled(timeout=0.05) is False  # still held
    gate.set()
    assert wait_compiled(timeout=600) is True
    assert compile_stats().pending == 0
    x2, y2 = torch.randn(4, 6), torch.randn(4, 6)
    torch.testing.assert_close(fn(x2, y2), _math(x2, y2))
    after = compile_stats()
    assert max_calls.of("inference") == 1
    assert after.eager_calls == 2
    assert after.graphs_built == 1
    # pending is a gauge: a reset zeroes the counters, not what is running.
    reset_compile_stats()
    assert compile_stats().eager_calls == 0


def test_pending_survives_a_reset(gate):
    fn = torch.compile(_math, backend=max_backend, options=BACKGROUND)
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    fn(x, y)
    reset_compile_stats()
    assert compile_stats().pending == 1
    gate.set()
    assert wait_compiled(timeout=600)
    assert compile_stats().pending == 0


def _failing_compile(*args, **kwargs) -> Future:
    failed: Future = Future()
    failed.set_exception(RuntimeError("the MAX compiler gave up"))
    return failed


def test_a_failing_compile_stays_on_pytorch_and_warns_once(
    gate, monkeypatch, max_calls
):
    monkeypatch.setattr(compiling, "compile_graph_async", _failing_compile)
    fn = torch.compile(_math, backend=max_backend, options=BACKGROUND)
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    torch.testing.assert_close(fn(x, y), _math(x, y))
    gate.set()
    assert wait_compiled(timeout=600)
    with pytest.warns(FallbackWarning, match="the MAX compiler gave up"):
        torch.testing.assert_close(fn(x, y), _math(x, y))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(fn(x, y), _math(x, y))
    assert max_calls.count == 0


def test_a_failing_compile_raises_under_strict(gate, monkeypatch):
    monkeypatch.setattr(compiling, "compile_graph_async", _failing_compile)
    fn = torch.compile(
        _math, backend=max_backend, options={**BACKGROUND, "strict": True}
    )
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    first = fn(x, y)  # before the failure is known: in PyTorch
    torch.testing.assert_close(first, _math(x, y))
    gate.set()
    with pytest.raises(MaxCompilerError, match="the MAX compiler gave up"):
        wait_compiled(timeout=600)
    assert wait_compiled(timeout=600)  # raised once
    with pytest.raises(MaxCompilerError, match="MAX failed to compile graph"):
        fn(x, y)


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def _train(model: torch.nn.Module, steps: int, compiled: bool, after_first=None):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(1)
    batches = [(torch.randn(5, 6), torch.randn(5, 3)) for _ in range(steps)]

    def step(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        return loss.detach()

    run = (
        torch.compile(step, backend=max_backend, options=BACKGROUND)
        if compiled
        else step
    )
    losses = []
    for i, (x, target) in enumerate(batches):
        losses.append(run(x, target))
        if i == 0 and after_first is not None:
            after_first()
    return losses


def test_training_matches_eager_across_the_switch(gate, max_calls):
    torch.manual_seed(0)
    eager_model = _Mlp()
    compiled_model = _Mlp()
    compiled_model.load_state_dict(eager_model.state_dict())
    reset_compile_stats()

    def switch() -> None:
        # The first step ran wholly in PyTorch; every later one on MAX.
        assert max_calls.count == 0
        gate.set()
        assert wait_compiled(timeout=600)

    expected = _train(eager_model, 4, compiled=False)
    got = _train(compiled_model, 4, compiled=True, after_first=switch)
    torch.testing.assert_close(got, expected)
    for a, b in zip(compiled_model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert compile_stats().eager_calls >= 2  # forward and backward of step 1
    assert max_calls.of("forward") >= 2 and max_calls.of("backward") >= 2


def test_the_backward_compiles_with_the_forward(gate):
    # The backward's compile starts before any backward runs.
    model = _Mlp()
    fn = torch.compile(model, backend=max_backend, options=BACKGROUND)
    fn(torch.randn(5, 6))
    assert compile_stats().pending == 2
    gate.set()
    assert wait_compiled(timeout=600)


def test_the_build_starts_when_the_first_call_has_returned(monkeypatch):
    # Building holds the GIL; started at once it would slow the first call.
    monkeypatch.setattr(background, "FIRST_CALL_WAIT", 600.0)
    started = threading.Event()

    def start_compile(copied: torch.fx.GraphModule):
        started.set()
        return lambda: make_boxed_func(copied.forward)

    gm = torch.fx.symbolic_trace(lambda x: (x * 2 + 1,))
    switch = background.compile_in_background(
        "probe", gm, start_compile, strict=False, verbose=False
    )
    assert not started.wait(0.5)
    x = torch.randn(3)
    torch.testing.assert_close(switch([x])[0], x * 2 + 1)
    assert started.wait(60)
    assert wait_compiled(timeout=60)
    torch.testing.assert_close(switch([x])[0], x * 2 + 1)
    assert switch.compiled is not None


def test_dynamic_shapes_switch_to_one_max_graph_for_every_size(max_calls):
    reset_compile_stats()
    fn = torch.compile(_math, backend=max_backend, options=BACKGROUND, dynamic=True)
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    torch.testing.assert_close(fn(x, y), _math(x, y))  # in PyTorch
    assert wait_compiled(timeout=600)
    for rows in (5, 9, 3):
        x, y = torch.randn(rows, 7), torch.randn(rows, 7)
        torch.testing.assert_close(fn(x, y), _math(x, y))
    assert max_calls.of("inference") == 3
    assert compile_stats().graphs_built == 1  # no recompile for a new size
