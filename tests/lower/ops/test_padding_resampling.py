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


def test_bicubic_grid_sampling_is_refused():
    x, grid = torch.randn(1, 1, 3, 3), torch.zeros(1, 2, 2, 2)
    with pytest.raises(UnsupportedOpsError, match="bicubic"):
        torch.compile(
            lambda a, g: F.grid_sample(a, g, mode="bicubic", align_corners=False),
            backend=max_backend,
            options={"strict": True},
        )(x, grid)
