"""Regions marked ``torch.compiler.nested_compile_region`` (regional
compilation) reach the backend as ``invoke_subgraph`` and run on MAX, each
call inlined into the graph's one MAX graph (lower/builder/higher_order.py)."""

from __future__ import annotations

import torch

from torch_max_backend import max_backend


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    @torch.compiler.nested_compile_region
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A lifted scalar and a reduction inside the region.
        return torch.relu(self.linear(x)) * 0.5 + x.mean(dim=-1, keepdim=True)


def _stack() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(_Layer(), _Layer(), _Layer())


def test_a_stack_of_marked_layers_runs_as_one_max_graph(max_calls, built_graphs):
    model = _stack()
    compiled = torch.compile(model, backend=max_backend, options={"strict": True})
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert max_calls.count == 1
    ((gm, _),) = built_graphs
    regions = [n for n in gm.graph.nodes if "invoke_subgraph" in str(n.target)]
    assert len(regions) == 3  # the regions reached the backend as such


def test_a_training_step_through_marked_layers_matches_eager():
    model, reference = _stack(), _stack()
    compiled = torch.compile(model, backend=max_backend, options={"strict": True})
    x = torch.randn(4, 16)
    compiled(x).square().sum().backward()
    reference(x).square().sum().backward()
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)
