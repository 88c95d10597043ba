"""The ATen graph fingerprint that keys warm starts: equal exactly when the
built MAX graph and plan are equal, and absent when it cannot say."""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend.lower.builder import graph_fingerprint


def _aten(fn, *args) -> torch.fx.GraphModule:
    return make_fx(fn, tracing_mode="fake", _allow_non_fake_inputs=True)(*args)


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * 2.5


def _scaled_otherwise(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * -4.0


def test_the_same_graph_has_the_same_fingerprint():
    x = torch.randn(3, 4)
    first = graph_fingerprint(_aten(_scaled, x))
    assert first is not None and len(first) == 64
    assert graph_fingerprint(_aten(_scaled, torch.randn(3, 4))) == first


def test_what_changes_the_built_graph_changes_the_fingerprint():
    x = torch.randn(3, 4)
    reference = graph_fingerprint(_aten(_scaled, x))
    others = [
        _aten(_scaled_otherwise, x),  # a scalar argument
        _aten(_scaled, torch.randn(3, 5)),  # a size
        _aten(_scaled, x.double()),  # a dtype
        _aten(_scaled, torch.randn(4, 3).t()),  # strides
    ]
    fingerprints = {graph_fingerprint(gm) for gm in others}
    assert None not in fingerprints
    assert reference not in fingerprints and len(fingerprints) == len(others)


def test_a_constant_s_value_is_not_part_of_it():
    # Graph attributes are fed as inputs, read from the graph at every start.
    x, constant = torch.randn(2), torch.tensor([1.0, 2.0])
    gm = _aten(lambda x: x * constant, x)
    constants = [n for n in gm.graph.nodes if n.op == "get_attr"]
    assert constants, "expected the tensor constant as a graph attribute"
    before = graph_fingerprint(gm)
    getattr(gm, constants[0].target).fill_(7.0)
    assert graph_fingerprint(gm) == before is not None


def test_a_graph_with_an_op_of_another_namespace_has_none():
    @torch.library.custom_op("fingerprint_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @twice.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    gm = _aten(lambda x: twice(x) + 1, torch.randn(3))
    assert graph_fingerprint(gm) is None


def test_another_library_s_op_we_lower_by_name_has_one():
    import transformers.integrations.moe  # noqa: F401  (defines the op)

    def experts(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.ops.transformers.grouped_mm_fallback(x, w, offs)

    args = (torch.randn(6, 4), torch.randn(2, 4, 3), torch.tensor([2, 6]))
    first = graph_fingerprint(_aten(experts, *args))
    assert first is not None
    wider = (torch.randn(6, 4), torch.randn(2, 4, 5), torch.tensor([2, 6]))
    assert graph_fingerprint(_aten(experts, *wider)) not in (first, None)
