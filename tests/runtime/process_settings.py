"""A process-wide runtime step (started at a CPU graph's first compile) runs
only where its setting allows."""

from __future__ import annotations

import torch

from torch_max_backend import max_backend


def simple_math(x, y):  # test_backend's structure: a cache hit
    return x + y * 2


def assert_started_only_where_allowed(monkeypatch, setting: str, step: str) -> None:
    """``compiling.<step>`` is called by a compile with ``setting`` on (the
    default), not by one with it off."""
    from torch_max_backend.pipeline import compiling

    module_name, function = step.split(".")
    started: list[bool] = []
    monkeypatch.setattr(
        getattr(compiling, module_name),
        function,
        lambda: started.append(True) or True,
    )
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch._dynamo.reset()
    off = torch.compile(simple_math, backend=max_backend, options={setting: False})
    torch.testing.assert_close(off(x, y), x + y * 2)
    assert started == []
    torch._dynamo.reset()
    on = torch.compile(simple_math, backend=max_backend)
    torch.testing.assert_close(on(x, y), x + y * 2)
    assert started == [True]
