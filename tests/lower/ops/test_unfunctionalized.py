"""In-place batch norm, which torch.compile never hands us but FX graphs can.

Functionalization rewrites ``_native_batch_norm_legit`` into its functional
variant; graphs written at the FX level (a ``symbolic_trace`` of ATen calls,
a hand-built graph) keep it. Checked here through the backend's graph
compiler. (The ``.vec`` upsampling overloads, likewise never seen under
torch.compile, are checked from an exported graph in
test_padding_resampling.py.)
"""

from __future__ import annotations

import pytest
import torch
from torch.fx import symbolic_trace
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from torch_max_backend import UnsupportedOpsError
from torch_max_backend.backend import compile_aten_graph
from torch_max_backend.settings import Settings

aten = torch.ops.aten


def _traced(fn, inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
    """The ATen calls of fn as written, with the shapes the builder reads."""
    gm = symbolic_trace(fn)
    FakeTensorProp(gm).propagate(*inputs)
    return gm


def _batch_norm_eval(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    normalized, saved_mean, saved_rstd = aten._native_batch_norm_legit.default(
        x, w, b, mean, var, False, 0.1, 1e-5
    )
    return normalized, saved_mean, saved_rstd


def test_evaluation_batch_norm_matches_eager(max_calls):
    torch.manual_seed(0)
    inputs = [
        torch.randn(2, 3, 4, 4),
        torch.randn(3),
        torch.randn(3),
        torch.randn(3),
        torch.rand(3) + 0.5,
    ]
    gm = _traced(_batch_norm_eval, inputs)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert aten._native_batch_norm_legit.default in targets
    compiled = compile_aten_graph(gm, inputs, settings=Settings(), kind="inference")
    got = compiled(list(inputs))
    expected = _batch_norm_eval(*inputs)
    assert max_calls.count == 1
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


def test_in_place_training_batch_norm_is_reported():
    def train_mode(x, mean, var):
        return aten._native_batch_norm_legit.default(
            x, None, None, mean, var, True, 0.1, 1e-5
        )[0]

    inputs = [torch.randn(2, 3, 4), torch.zeros(3), torch.ones(3)]
    gm = _traced(train_mode, inputs)
    with pytest.raises(UnsupportedOpsError, match="updates its running statistics"):
        compile_aten_graph(gm, inputs, settings=Settings(strict=True), kind="inference")
