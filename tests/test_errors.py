"""Clear errors: every unsupported op at once, failing lowerings named, bad options."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import (
    MAPPING_TORCH_ATEN_TO_MAX,
    LoweringError,
    MaxCompilerError,
    UnsupportedOpsError,
    max_backend,
)

aten = torch.ops.aten


# Two ops that no lowering will ever cover: custom ops of this test module.
@torch.library.custom_op("max_backend_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("max_backend_test::enigma", mutates_args=())
def enigma(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@enigma.register_fake
def _(x):
    return torch.empty_like(x)


# d(mystery)/dx is computed with enigma: only the backward graph uses it.
mystery.register_autograd(lambda ctx, grad: enigma(grad))


def test_unsupported_ops_are_all_listed_with_counts_and_source():
    def fn(x):
        a = mystery(x)
        b = mystery(x + 1)
        return enigma(a + b)

    with pytest.raises(UnsupportedOpsError) as info:
        torch.compile(fn, backend=max_backend, options={"strict": True})(
            torch.randn(3, 4)
        )
    message = str(info.value)
    assert "max_backend_test.mystery.default (2 occurrence(s))" in message
    assert "max_backend_test.enigma.default (1 occurrence(s))" in message
    assert "mystery(Tensor x) -> Tensor" in message  # the schema
    assert "test_errors.py" in message and "b = mystery(x + 1)" in message
    names = {op.name for op in info.value.ops}
    assert names == {
        "max_backend_test.mystery.default",
        "max_backend_test.enigma.default",
    }
    assert isinstance(info.value, MaxCompilerError)


def test_unsupported_backward_ops_are_reported_before_running():
    # enigma appears only in the backward graph, yet the first call already
    # reports it, with the forward's mystery: both graphs are checked together.
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(UnsupportedOpsError) as info:
        torch.compile(
            lambda t: mystery(t).sum(), backend=max_backend, options={"strict": True}
        )(x)
    names = {op.name for op in info.value.ops}
    assert names == {
        "max_backend_test.mystery.default",
        "max_backend_test.enigma.default",
    }


def test_failing_lowering_names_node_and_op(monkeypatch):
    def broken(self):
        raise ValueError("deliberately broken")

    monkeypatch.setitem(MAPPING_TORCH_ATEN_TO_MAX._table, aten.tanh.default, broken)
    # In default mode the node would run in PyTorch (tests/test_fallback.py).
    strict = {"strict": True}
    with pytest.raises(LoweringError) as info:
        torch.compile(lambda x: torch.tanh(x) + 1, backend=max_backend, options=strict)(
            torch.randn(3)
        )
    message = str(info.value)
    assert "aten.tanh.default" in message
    assert "deliberately broken" in message
    assert "Tensor(shape=[3], dtype=torch.float32" in message
    assert "node 'tanh'" in message


def test_lowering_returning_wrong_dtype_is_caught(monkeypatch):
    from max.dtype import DType
    from max.graph import ops

    monkeypatch.setitem(
        MAPPING_TORCH_ATEN_TO_MAX._table,
        aten.tanh.default,
        lambda x: ops.cast(x, DType.float64),
    )
    with pytest.raises(LoweringError, match="dtype float64, expected float32"):
        torch.compile(torch.tanh, backend=max_backend, options={"strict": True})(
            torch.randn(3)
        )


def test_mixed_devices_are_rejected_clearly():
    meta = torch.empty(3, device="meta")
    with pytest.raises(Exception, match="meta"):
        torch.compile(lambda a, b: a + b, backend=max_backend)(torch.randn(3), meta)


def test_unknown_option_is_rejected():
    with pytest.raises(Exception, match="unknown torch-max-backend option 'verbos'"):
        torch.compile(lambda x: x + 1, backend=max_backend, options={"verbos": True})(
            torch.randn(2)
        )
