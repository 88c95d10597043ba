"""Padding, upsampling, grid sampling and col2im: many variants per compiled graph."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import (
    MAPPING_TORCH_ATEN_TO_MAX,
    UnsupportedOpsError,
    max_backend,
)
from torch_max_backend.backend import compile_aten_graph
from torch_max_backend.settings import Settings

from .helpers import check_against_eager

aten = torch.ops.aten


def _spy(monkeypatch: pytest.MonkeyPatch, ops: list) -> set:
    """Records which of ``ops`` their lowerings really built."""
    seen: set = set()
    for op in ops:
        original = MAPPING_TORCH_ATEN_TO_MAX[op]

        # wraps() also copies the lowering's capability attributes.
        @functools.wraps(original)
        def spy(*args: object, _op: object = op, _fn: Callable = original, **kwargs):
            seen.add(_op)
            return _fn(*args, **kwargs)

        monkeypatch.setitem(MAPPING_TORCH_ATEN_TO_MAX, op, spy)
    return seen


def test_padding_grid_sampling_and_col2im(max_calls, monkeypatch):
    ops = [
        aten.constant_pad_nd.default,
        aten.reflection_pad1d.default,
        aten.reflection_pad2d.default,
        aten.reflection_pad3d.default,
        aten.replication_pad2d.default,
        aten.replication_pad3d.default,
        aten.grid_sampler_2d.default,
        aten.col2im.default,
    ]
    lowered = _spy(monkeypatch, ops)

    def fn(x, seq, vol, grid, cols, strided_cols, ints):
        samples = [
            F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=ac)
            for mode, padding, ac in [
                ("bilinear", "zeros", False),
                ("bilinear", "zeros", True),
                ("bilinear", "border", False),
                ("bilinear", "reflection", False),
                ("bilinear", "reflection", True),
                ("nearest", "zeros", False),
                ("nearest", "border", True),
                ("nearest", "reflection", False),
            ]
        ]
        return (
            F.pad(x, (1, 2, 3, 0)),
            F.pad(x, (1, 2, -1, 1), value=-1.5),  # negative pads crop
            F.pad(ints, (0, 2, 1, 1), value=7),
            F.pad(seq, (3, 2), mode="reflect"),
            F.pad(x, (2, 1, 3, 2), mode="reflect"),
            F.pad(x[0], (2, 1, 1, 2), mode="reflect"),  # unbatched
            F.pad(vol, (1, 2, 2, 0, 0, 1), mode="reflect"),
            F.pad(x, (2, 1, 0, 3), mode="replicate"),
            F.pad(x, (-1, 2, 1, -2), mode="replicate"),  # negatives crop
            F.pad(x, (-6, 7, 0, 0), mode="replicate"),  # past the whole width
            F.pad(vol, (1, 2, 2, 0, 0, 1), mode="replicate"),
            *samples,
            F.fold(cols, (4, 5), (2, 2)),
            F.fold(
                strided_cols, (3, 7), (2, 3), dilation=(1, 2), padding=(1, 0), stride=2
            ),
            F.fold(cols[0], (4, 5), (2, 2)),  # unbatched
        )

    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5)
    # Beyond [-1, 1], to exercise every padding mode.
    grid = torch.rand(2, 3, 6, 2) * 2.6 - 1.3
    with torch.no_grad():
        check_against_eager(
            fn,
            x,
            torch.randn(2, 3, 6),
            torch.randn(1, 2, 3, 4, 5),
            grid,
            torch.randn(2, 3 * 2 * 2, 12),
            torch.randn(2, 2 * 2 * 3, 4),
            torch.randint(-9, 9, (3, 4)),
        )
    assert max_calls.count == 1
    assert lowered == set(ops)


def test_upsampling_from_an_exported_graph(max_calls):
    # Under torch.compile, AOTAutograd runs torch's Python decompositions of
    # the .vec overloads (registered for CompositeImplicitAutograd and
    # Autograd) before any backend sees them; exported graphs keep them.
    def fn(x):
        return (
            F.interpolate(x, scale_factor=2, mode="nearest"),
            F.interpolate(x, size=(7, 3), mode="nearest"),
            F.interpolate(x, scale_factor=(1.5, 2.5), mode="nearest"),
            F.interpolate(x, scale_factor=1.5, mode="bilinear"),
            F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True),
            F.interpolate(x, size=(3, 8), mode="bilinear"),
            F.interpolate(x, scale_factor=(0.5, 1.7), mode="bilinear"),
        )

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return fn(x)

    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 4)
    gm = torch.export.export(Model(), (x,)).run_decompositions({}).graph_module
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert targets == {aten.upsample_nearest2d.vec, aten.upsample_bilinear2d.vec}

    compiled = compile_aten_graph(
        gm, [x], settings=Settings.resolve(None), kind="inference"
    )
    got = compiled([x])
    for i, (g, e) in enumerate(zip(got, fn(x), strict=True)):
        torch.testing.assert_close(g, e, msg=lambda m, i=i: f"output {i}: {m}")
    assert max_calls.count == 1


def test_bicubic_grid_sampling_is_refused():
    x, grid = torch.randn(1, 1, 3, 3), torch.zeros(1, 2, 2, 2)
    with pytest.raises(UnsupportedOpsError, match="bicubic"):
        torch.compile(
            lambda a, g: F.grid_sample(a, g, mode="bicubic", align_corners=False),
            backend=max_backend,
            options={"strict": True},
        )(x, grid)
