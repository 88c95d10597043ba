"""Compile a function with MAX, run it and eager PyTorch, compare every output."""

from __future__ import annotations

from collections.abc import Callable

import torch

from torch_max_backend import max_backend


def check_against_eager(
    fn: Callable[..., object],
    *args: torch.Tensor,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    """One MAX graph (fullgraph) must reproduce eager for each output: values, dtypes."""
    expected = fn(*args)
    got = torch.compile(
        fn, backend=max_backend, fullgraph=True, options={"strict": True}
    )(*args)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(
            g,
            e,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            msg=lambda m, i=i: f"output {i}: {m}",
        )
