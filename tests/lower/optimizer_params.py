"""Parameters with gradients for the optimizer-update tests."""

from __future__ import annotations

import torch


def params_with_grads(
    shapes: list[tuple[int, ...]], dtype: torch.dtype = torch.float32
) -> list[torch.nn.Parameter]:
    """One parameter per shape, each with a gradient; seeded, so every call
    gives the same values (a compiled and an eager optimizer get equal twins)."""
    generator = torch.Generator().manual_seed(0)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.randn(shape, generator=generator, dtype=dtype))
        p.grad = torch.randn(shape, generator=generator, dtype=dtype)
        params.append(p)
    return params
