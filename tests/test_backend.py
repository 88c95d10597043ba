"""End-to-end: torch.compile with the MAX backend against eager PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import max_backend


def test_simple_math(max_calls):
    @torch.compile(backend=max_backend)
    def simple_math(x, y):
        return x + y * 2

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(simple_math(x, y), x + y * 2)
    assert max_calls.of("inference") == 1


def test_several_outputs_through_backend_name(max_calls):
    @torch.compile(backend="max", fullgraph=True)
    def fn(x, y, z):
        return x + y + z, x + z

    x, y, z = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4)
    a, b = fn(x, y, z)
    torch.testing.assert_close(a, x + y + z)
    torch.testing.assert_close(b, x + z)
    assert max_calls.count == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_an_empty_constant_of_a_type_numpy_lacks_is_built(max_calls, dtype):
    """A tensor made inside the traced code is a graph constant; an empty one
    of bfloat16 (which numpy has no type for) crashed the build."""

    @torch.compile(backend=max_backend, options={"strict": True})
    def grow(x):
        return torch.cat([x, torch.tensor([], dtype=x.dtype).reshape(0, 4)]) * 2

    x = torch.randn(3, 4, dtype=dtype)
    torch.testing.assert_close(grow(x), x * 2)
    assert max_calls.count == 1


def test_scalars_are_graph_inputs_so_structure_is_shared(max_calls):
    # Same structure, other constants: the second function reuses the first's
    # compiled artifact (one MAX compile), and each gives its own result.
    from torch_max_backend.runtime import session

    before = len(session.MODELS)

    @torch.compile(backend=max_backend)
    def times_two(x, y):
        return x + y * 2

    @torch.compile(backend=max_backend)
    def times_three(x, y):
        return x + y * 3.5

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(times_two(x, y), x + y * 2)
    torch.testing.assert_close(times_three(x, y), x + y * 3.5)
    assert len(session.MODELS) - before <= 1
    assert max_calls.count == 2


def test_mlp(max_calls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32),
        torch.nn.ReLU(),
        torch.nn.Linear(32, 32),
        torch.nn.GELU(),
        torch.nn.Linear(32, 4),
    ).eval()
    x = torch.randn(8, 16)
    compiled = torch.compile(model, backend="max", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert max_calls.count == 1


def test_in_place_input_mutation_is_written_back(max_calls):
    def fn(x, y):
        x.add_(1)
        y.mul_(x[:, :1])  # y arrives as a strided (transposed) view
        return x * 2

    def only_writes(x):
        x.mul_(3)

    def inputs():
        return torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(3, 2).t()

    (x_eager, y_eager), (x_max, y_max) = inputs(), inputs()
    expected = fn(x_eager, y_eager)
    pointer, versions = x_max.data_ptr(), (x_max._version, y_max._version)
    got = torch.compile(fn, backend=max_backend, fullgraph=True)(x_max, y_max)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x_max, x_eager)
    torch.testing.assert_close(y_max, y_eager)
    # Written in place by MAX, and torch's version counters know it (autograd
    # checks them on saved tensors).
    assert x_max.data_ptr() == pointer
    assert x_max._version > versions[0] and y_max._version > versions[1]
    # A graph whose only effect is the write still runs.
    torch.compile(only_writes, backend=max_backend, fullgraph=True)(x_max)
    torch.testing.assert_close(x_max, x_eager * 3)
    assert max_calls.count == 2


def test_training_step_matches_eager(max_calls):
    torch.manual_seed(0)
    eager_model = torch.nn.Linear(3, 2)
    max_model = torch.nn.Linear(3, 2)
    max_model.load_state_dict(eager_model.state_dict())

    def make_step(model):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

        def step(x, y):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            return loss

        return step

    eager_step = make_step(eager_model)
    max_step = torch.compile(make_step(max_model), backend=max_backend)
    for _ in range(3):
        x, y = torch.randn(4, 3), torch.randn(4, 2)
        torch.testing.assert_close(max_step(x, y), eager_step(x, y))
        for p_max, p_eager in zip(
            max_model.parameters(), eager_model.parameters(), strict=True
        ):
            torch.testing.assert_close(p_max.grad, p_eager.grad)
            torch.testing.assert_close(p_max, p_eager)
    # Forward and backward ran on MAX each step (the optimizer step too).
    assert max_calls.of("forward") == 3
    assert max_calls.of("backward") == 3


def test_changing_sizes_recompile_to_symbolic_dims(max_calls):
    # Dynamo's automatic dynamic shapes: the second size makes the graph's
    # first dim symbolic; the third size then reuses that graph.
    @torch.compile(backend=max_backend)
    def fn(x, y):
        return (x + y * 2).sum(0), x.view(-1), x[1:]

    for n in (3, 5, 7):
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        total, flat, tail = fn(x, y)
        torch.testing.assert_close(total, (x + y * 2).sum(0))
        torch.testing.assert_close(flat, x.view(-1))
        torch.testing.assert_close(tail, x[1:])
    assert max_calls.count == 3
    assert len({name for name in max_calls.names}) == 2


def test_parameters_updated_in_place_are_seen_and_inputs_not_kept(max_calls):
    import gc
    import weakref

    model = torch.nn.Linear(3, 4)
    compiled = torch.compile(model, backend=max_backend)
    x = torch.randn(2, 3)
    with torch.no_grad():
        compiled(x)
        model.weight.mul_(2)  # the MAX buffer aliases the parameter's memory
        torch.testing.assert_close(compiled(x), model(x))
        model.weight = torch.nn.Parameter(torch.ones(4, 3))  # new storage
        torch.testing.assert_close(compiled(x), model(x))
        fresh = torch.randn(2, 3)  # a new input, seen once
        torch.testing.assert_close(compiled(fresh), model(fresh))
    ref = weakref.ref(fresh)
    del fresh
    gc.collect()
    assert ref() is None, "a per-call input was kept alive by the compiled graph"


def test_outputs_are_fresh_tensors_that_outlive_later_calls(monkeypatch):
    # MAX's results go straight to torch (no assembly loop) when the graph
    # returns them as they are, and through the slot loop when an output is a
    # size expression; either way each call's tensors are its own.
    from torch_max_backend.runtime.compiled_graph import CompiledGraph

    graphs: list[CompiledGraph] = []
    original = CompiledGraph.__init__

    def remember(self: CompiledGraph, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        graphs.append(self)

    monkeypatch.setattr(CompiledGraph, "__init__", remember)

    @torch.compile(backend=max_backend, fullgraph=True)
    def products(x, y):
        return x * y, x - y

    @torch.compile(backend=max_backend, fullgraph=True, dynamic=True)
    def with_sizes(x):
        return x * 3, x.shape[0] + 1, x.shape[0] // 2

    x, y = torch.randn(5, 4), torch.randn(5, 4)
    first = products(x, y)
    second = products(y, x + 1)
    torch.testing.assert_close(first[0], x * y)
    torch.testing.assert_close(first[1], x - y)
    torch.testing.assert_close(second[1], y - (x + 1))
    assert first[1].data_ptr() != second[1].data_ptr()

    # Sizes computed from the inputs at each call: one graph serves both.
    for rows in (5, 8):
        z = torch.randn(rows, 4)
        tripled, plus_one, half = with_sizes(z)
        torch.testing.assert_close(tripled, z * 3)
        assert (plus_one, half) == (rows + 1, rows // 2)
    assert [g._results_only for g in graphs] == [True, False]


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_torch_compile_modes_are_accepted(max_calls, mode):
    # transformers' CompileConfig passes mode="reduce-overhead" by default.
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    got = torch.compile(lambda a, b: a + b * 2, backend="max", mode=mode)(x, y)
    torch.testing.assert_close(got, x + y * 2)
    assert max_calls.count == 1


def test_an_unknown_mode_is_refused_with_the_known_ones():
    fn = torch.compile(lambda a: a + 1, backend="max", mode="fastest-please")
    with pytest.raises(
        Exception, match=r"does not know mode 'fastest-please'.*reduce-overhead"
    ):
        fn(torch.randn(2))
