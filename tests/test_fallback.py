"""Ops MAX cannot run fall back to PyTorch; the rest still runs on MAX."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import UnsupportedOpsError, max_backend
from torch_max_backend.pipeline.fallback import FallbackWarning


# An op no lowering will ever cover, with a backward written in PyTorch ops.
@torch.library.custom_op("max_fallback_test::swish", mutates_args=())
def swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@swish.register_fake
def _(x):
    return torch.empty_like(x)


def _swish_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    s = torch.sigmoid(x)
    return grad * (s + x * s * (1 - s))


swish.register_autograd(
    _swish_backward,
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs),
)


def _chain(x: torch.Tensor) -> torch.Tensor:
    """Eight elementwise ops: a block large enough for the default min_block_size."""
    return torch.tanh(torch.exp(-(x * 0.5 + 1.0).abs()) * 3.0 - 1.0)


def sandwich(x: torch.Tensor) -> torch.Tensor:
    return _chain(swish(_chain(x)))


def test_unsupported_op_runs_in_pytorch_between_max_blocks(max_calls):
    x = torch.randn(8, 16)
    compiled = torch.compile(sandwich, backend=max_backend)
    with pytest.warns(FallbackWarning) as warned:
        got = compiled(x)
    torch.testing.assert_close(got, sandwich(x))
    message = str(warned[0].message)
    assert "max_fallback_test.swish.default x1 (no MAX lowering)" in message
    assert "2 block(s) run on MAX" in message
    # Both chains ran on MAX (they are one graph structure, compiled once).
    assert max_calls.of("inference") == 2
    torch.testing.assert_close(compiled(x * 2), sandwich(x * 2))
    assert max_calls.of("inference") == 4


def test_strict_raises_naming_the_op():
    compiled = torch.compile(sandwich, backend=max_backend, options={"strict": True})
    with pytest.raises(UnsupportedOpsError, match=r"max_fallback_test\.swish\.default"):
        compiled(torch.randn(8, 16))


def test_torch_executed_ops_moves_an_op_to_pytorch(max_calls):
    x = torch.randn(8, 16)
    options = {"torch_executed_ops": ["aten.tanh"], "min_block_size": 1}
    compiled = torch.compile(_chain, backend=max_backend, options=options)
    with pytest.warns(FallbackWarning, match=r"aten.tanh.default x1 \(listed in"):
        got = compiled(x)
    torch.testing.assert_close(got, _chain(x))
    assert max_calls.of("inference") == 1  # everything before tanh


def test_training_step_through_a_fallback_op_matches_eager(max_calls):
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    ours = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    ours.load_state_dict(eager.state_dict())

    def step(model, forward, x, y):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = torch.nn.functional.mse_loss(forward(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    def forward_of(model):
        return lambda x: model[1](swish(model[0](x)))

    compiled = torch.compile(
        forward_of(ours), backend=max_backend, options={"min_block_size": 1}
    )
    x, y = torch.randn(5, 16), torch.randn(5, 4)
    with pytest.warns(FallbackWarning, match="swish"):
        got = step(ours, compiled, x, y)
    torch.testing.assert_close(got, step(eager, forward_of(eager), x, y))
    for a, b in zip(ours.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert max_calls.of("forward") >= 1 and max_calls.of("backward") >= 1


def _broken_tanh(x):
    raise RuntimeError("deliberately broken")


def _rejected_tanh(x):
    """Builds, but MAX's compiler rejects it: an arg reduction over a size-1 axis."""
    from max.graph import ops

    picked = ops.argmax(ops.unsqueeze(x, -1), axis=-1)
    return ops.cast(ops.squeeze(picked, -1), x.dtype)


def test_a_lowering_that_raises_runs_its_node_in_pytorch(max_calls, monkeypatch):
    from torch_max_backend import (
        MAPPING_TORCH_ATEN_TO_MAX,
        compile_stats,
        reset_compile_stats,
    )

    monkeypatch.setitem(
        MAPPING_TORCH_ATEN_TO_MAX._table, torch.ops.aten.tanh.default, _broken_tanh
    )
    x = torch.randn(8, 16)
    reset_compile_stats()
    compiled = torch.compile(_chain, backend=max_backend)
    with pytest.warns(FallbackWarning) as warned:
        got = compiled(x)
    torch.testing.assert_close(got, _chain(x))
    assert len(warned) == 1
    message = str(warned[0].message)
    assert "aten.tanh.default x1 (its lowering failed at node tanh" in message
    assert "Tensor(shape=[8, 16], dtype=torch.float32" in message
    assert "RuntimeError: deliberately broken" in message
    assert "1 block(s) run on MAX" in message
    # Everything before tanh ran on MAX, as one graph: the failure was found
    # by building, before anything was handed to MAX's compiler.
    assert max_calls.of("inference") == 1
    stats = compile_stats()
    assert stats.max_compiles + stats.cache_hits == 1
    # explain() reports the same placement.
    from torch_max_backend import explain

    (graph,) = explain(_chain, x).graphs
    ops = {op.op: op for op in graph.ops}
    assert not ops["aten.tanh.default"].on_max
    assert "deliberately broken" in ops["aten.tanh.default"].reason
    assert graph.max_blocks == [7]


def test_a_graph_max_cannot_compile_runs_in_pytorch(max_calls, monkeypatch):
    from torch_max_backend import MAPPING_TORCH_ATEN_TO_MAX, MaxCompilerError

    monkeypatch.setitem(
        MAPPING_TORCH_ATEN_TO_MAX._table, torch.ops.aten.tanh.default, _rejected_tanh
    )
    x = torch.randn(8, 16)
    compiled = torch.compile(_chain, backend=max_backend)
    with pytest.warns(FallbackWarning) as warned:
        got = compiled(x)
    torch.testing.assert_close(got, _chain(x))
    assert len(warned) == 1
    message = str(warned[0].message)
    assert "graph inference_" in message and "runs in PyTorch" in message
    assert "MAX failed to compile" in message
    assert max_calls.count == 0
    torch._dynamo.reset()
    strict = torch.compile(_chain, backend=max_backend, options={"strict": True})
    with pytest.raises(MaxCompilerError, match="MAX failed to compile graph"):
        strict(x)


def test_fallback_options_are_checked(monkeypatch):
    from torch_max_backend.settings import Settings

    with pytest.raises(TypeError, match="min_block_size' must be an int >= 1"):
        Settings.resolve({"min_block_size": 0})
    with pytest.raises(TypeError, match="must be a list of ops"):
        Settings.resolve({"torch_executed_ops": "aten.tanh"})
    settings = Settings.resolve(
        {"torch_executed_ops": [torch.ops.aten.tanh, torch.ops.aten.sin.default, "cos"]}
    )
    assert settings.torch_executed_ops == {
        "aten.tanh",
        "aten.sin.default",
        "aten.cos",
    }
    monkeypatch.setenv("TORCH_MAX_BACKEND_MIN_BLOCK_SIZE", "3")
    monkeypatch.setenv("TORCH_MAX_BACKEND_TORCH_EXECUTED_OPS", "aten.exp, aten.abs")
    monkeypatch.setenv("TORCH_MAX_BACKEND_STRICT", "1")
    settings = Settings.resolve()
    assert settings.min_block_size == 3 and settings.strict
    assert settings.torch_executed_ops == {"aten.exp", "aten.abs"}
    monkeypatch.setenv("TORCH_MAX_BACKEND_MIN_BLOCK_SIZE", "few")
    with pytest.raises(ValueError, match="MIN_BLOCK_SIZE='few' is not an integer"):
        Settings.resolve()


def test_explain_reports_ops_blocks_and_no_breaks_without_max(max_calls):
    from torch_max_backend import explain

    report = explain(sandwich, torch.randn(8, 16))
    assert max_calls.names == []  # nothing ran on MAX
    (graph,) = report.graphs
    ops = {op.op: op for op in graph.ops}
    assert not ops["max_fallback_test.swish.default"].on_max
    assert ops["max_fallback_test.swish.default"].reason == "no MAX lowering"
    assert ops["aten.tanh.default"].count == 2 and ops["aten.tanh.default"].on_max
    assert graph.max_blocks == [8, 8]
    assert report.unsupported == {"max_fallback_test.swish.default": 1}
    assert report.graph_breaks == []
    text = str(report)
    assert "max_fallback_test.swish.default" in text and "no graph breaks" in text
    assert report.as_dict()["graphs"][0]["max_blocks"] == [8, 8]


def test_explain_lists_graph_breaks():
    from torch_max_backend import explain

    def broken(x):
        y = x.sin()
        print("a side effect")  # Dynamo breaks the graph here
        return y.cos()

    report = explain(broken, torch.randn(3))
    assert len(report.graphs) == 2
    assert len(report.graph_breaks) == 1
    assert "print" in report.graph_breaks[0].reason


def test_input_mutation_and_aliasing_across_the_boundary(max_calls):
    def fn(x, buf):
        buf.mul_(2).add_(1)  # an in-place update of an input
        y = swish(x + buf)
        return y * 3, y, buf.view(-1)  # an output aliasing the input

    x, buf = torch.randn(4, 3), torch.randn(4, 3)
    ours_buf = buf.clone()
    compiled = torch.compile(fn, backend=max_backend, options={"min_block_size": 1})
    with pytest.warns(FallbackWarning):
        got = compiled(x, ours_buf)
    expected = fn(x, buf)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(ours_buf, buf)  # the update reached the caller
    assert got[2].data_ptr() == ours_buf.data_ptr()  # the view aliases it
    assert max_calls.of("inference") >= 1


def test_a_split_report_without_refused_ops_says_what_ran_in_pytorch():
    from torch_max_backend.pipeline.fallback import SplitReport

    # Every op sat in a MAX block, and the one block failed to compile.
    report = SplitReport("forward_3", failed_blocks=["MAX failed to compile: boom"])
    message = report.message(min_block_size=5)
    assert "runs  in" not in message
    assert "graph forward_3 has no op refused by MAX" in message
    assert "0 block(s) run on MAX" in message
    assert "a block MAX could not take runs in PyTorch: MAX failed" in message
