"""Copies that only restride a value (``prims.copy_strided``, which torch's
decompositions add after an in-place op whose result strides differ from its
input's): dropped where nothing reads the strides
(lower/passes/strided_copies.py), lowered as the value they copy where kept
(lower/ops/shape.py), with eager's strides wherever the graph returns them."""

from __future__ import annotations

import torch

from torch_max_backend import max_backend
from torch_max_backend.lower.passes.strided_copies import (
    COPY_STRIDED,
    without_strided_copies,
)

from .aten_graphs import aten_graphs


def _copies(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is COPY_STRIDED]


def _lerp_into(moment: torch.Tensor, grad: torch.Tensor) -> None:
    moment.lerp_(grad, 0.1)


def test_a_copy_that_keeps_the_memory_order_is_dropped():
    """A channels-last depthwise filter's moment and its contiguous gradient
    differ in a size-1 dim's stride alone: the copy goes, and the write-back
    reads the lerp itself."""
    moment = torch.nn.Conv2d(4, 4, 3, groups=4).to(memory_format=torch.channels_last)
    moment = torch.zeros_like(moment.weight.detach())
    (gm,) = aten_graphs(
        _lerp_into, moment, torch.randn(4, 1, 3, 3), keep_inference_input_mutations=True
    )
    assert len(_copies(gm)) == 1
    rewritten = without_strided_copies(gm)
    assert _copies(rewritten) == []
    (write,) = [
        n for n in rewritten.graph.nodes if n.target is torch.ops.aten.copy_.default
    ]
    assert write.args[1].target is torch.ops.aten.add.Tensor
    assert len(_copies(gm)) == 1  # the caller's graph is left as it was


def _restrided(
    x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Column-major copies: one returned as it is, one read by a product, one
    # read by an elementwise op alone.
    returned = torch.ops.prims.copy_strided(x * 2, (1, 3))
    read = torch.ops.prims.copy_strided(x + 1, (1, 3))
    scaled = torch.ops.prims.copy_strided(x - 1, (1, 3)) * 3
    return returned, read @ y, scaled


def test_a_copy_whose_strides_are_read_is_kept_and_runs_on_max():
    x, y = torch.randn(3, 4), torch.randn(4, 2)
    (gm,) = aten_graphs(_restrided, x, y)
    kept = _copies(without_strided_copies(gm))
    assert [n.args[0].target for n in kept] == [
        torch.ops.aten.mul.Tensor,  # returned
        torch.ops.aten.add.Tensor,  # read by the product
    ]
    compiled = torch.compile(_restrided, backend=max_backend, options={"strict": True})
    got, expected = compiled(x, y), _restrided(x, y)
    torch.testing.assert_close(got, expected)
    assert got[0].stride() == expected[0].stride() == (1, 3)
