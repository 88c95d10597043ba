"""Upsampling (nearest, linear in 1 to 3 dims, bicubic) from exported graphs.

Under torch.compile, AOTAutograd runs torch's Python decompositions of the
.vec overloads (registered for CompositeImplicitAutograd and Autograd) before
any backend sees them; exported graphs keep them, and they lower here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from torch_max_backend.backend import compile_aten_graph
from torch_max_backend.settings import Settings

from .family_check import check_family

aten = torch.ops.aten


def test_upsampling_lowerings_build_for_every_opinfo_case():
    # No core OpInfo case reaches the .vec overloads (see above): the
    # exported graphs below test them.
    check_family(
        "upsampling",
        [
            f"aten.upsample_{name}.vec"
            for name in (
                "nearest2d",
                "linear1d",
                "bilinear2d",
                "trilinear3d",
                "bicubic2d",
            )
        ],
    )


def _exported_graph_matches_eager(
    fn: Callable[..., tuple[torch.Tensor, ...]],
    inputs: list[torch.Tensor],
    targets: set[object],
) -> None:
    """``fn`` exported (its ATen graph holds exactly ``targets``), compiled
    from that graph, and compared with eager output by output."""

    class Model(torch.nn.Module):
        def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return fn(*args)

    gm = torch.export.export(Model(), tuple(inputs)).run_decompositions({}).graph_module
    assert {n.target for n in gm.graph.nodes if n.op == "call_function"} == targets
    compiled = compile_aten_graph(
        gm, inputs, settings=Settings.resolve(None), kind="inference"
    )
    got = compiled(list(inputs))  # the boxed call empties its list
    for i, (g, e) in enumerate(zip(got, fn(*inputs), strict=True)):
        torch.testing.assert_close(g, e, msg=lambda m, i=i: f"output {i}: {m}")


def test_upsampling_from_an_exported_graph(max_calls):
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

    torch.manual_seed(0)
    _exported_graph_matches_eager(
        fn,
        [torch.randn(2, 3, 5, 4)],
        {aten.upsample_nearest2d.vec, aten.upsample_bilinear2d.vec},
    )
    assert max_calls.count == 1


def test_linear_trilinear_and_bicubic_upsampling_from_an_exported_graph(max_calls):
    def fn(seq, x, vol):
        return (
            F.interpolate(seq, scale_factor=2.5, mode="linear"),
            F.interpolate(seq, size=4, mode="linear", align_corners=True),
            F.interpolate(vol, scale_factor=(1.0, 1.5, 2.0), mode="trilinear"),
            F.interpolate(vol, size=(3, 2, 7), mode="trilinear", align_corners=True),
            F.interpolate(x, scale_factor=1.5, mode="bicubic"),
            F.interpolate(x, size=(9, 3), mode="bicubic", align_corners=True),
            # A scale factor resamples an axis whose size it keeps (5 * 1.1).
            F.interpolate(
                x, scale_factor=(1.1, 0.6), mode="bicubic", recompute_scale_factor=False
            ),
        )

    torch.manual_seed(0)
    _exported_graph_matches_eager(
        fn,
        [torch.randn(2, 3, 6), torch.randn(2, 3, 5, 4), torch.randn(1, 2, 3, 4, 5)],
        {
            aten.upsample_linear1d.vec,
            aten.upsample_trilinear3d.vec,
            aten.upsample_bicubic2d.vec,
        },
    )
    assert max_calls.count == 1
