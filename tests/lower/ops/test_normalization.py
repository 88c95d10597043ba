"""Batch, layer, group and weight normalization: the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten._native_batch_norm_legit.default",
    "aten._native_batch_norm_legit.no_stats",
    "aten._native_batch_norm_legit_no_training.default",
    "aten._weight_norm_interface_backward.default",
    # Written by lower/passes/rms_norms.py (torch decomposes it before a
    # backend sees it): tests/lower/test_rms_norms.py.
    "aten.rms_norm.default",
)


def test_normalization_lowerings_build_for_every_opinfo_case():
    check_family("normalization", OUTSIDE_OPINFO)


def test_half_precision_layer_group_and_batch_norm_compile_and_match_eager():
    # MAX fuses a composed layer norm into its LayerNorm kernel, whose epsilon
    # must be float32: statistics in bfloat16 made that graph fail to compile
    # (a BERT in bfloat16 ran in PyTorch), and a bfloat16 batch norm in
    # evaluation mode did not lower. Torch computes them in float32 too.
    import torch
    import torch.nn.functional as F

    from .helpers import check_against_eager

    def norms(x, w, b, img, gw, gb, mean, var):
        return (
            F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-12),
            F.layer_norm(x, (x.shape[-1],)),
            F.group_norm(img, 2, gw, gb),
            F.batch_norm(img, mean, var, gw, gb, training=False),
            F.batch_norm(img, mean, var, training=False),
        )

    torch.manual_seed(0)
    bf16 = torch.bfloat16
    x = (torch.randn(2, 5, 16) * 4 + 3).to(bf16)
    w, b = torch.randn(16, dtype=bf16), torch.randn(16, dtype=bf16)
    img = torch.randn(2, 4, 3, 3, dtype=bf16)
    gw, gb = torch.randn(4, dtype=bf16), torch.randn(4, dtype=bf16)
    mean, var = torch.randn(4, dtype=bf16), torch.rand(4, dtype=bf16) + 0.5
    with torch.no_grad():
        check_against_eager(
            norms, x, w, b, img, gw, gb, mean, var, rtol=1.6e-2, atol=1e-2
        )


def test_group_norm_with_one_channel_a_group_compiles(max_calls):
    # wav2vec2's feature encoder: GroupNorm(C, C) over [N, C, T]. Grouped as
    # [N, C, -1], the input's own shape, MAX fused the normalization and the
    # per-channel weight into its LayerNorm kernel and failed to compile the
    # graph (inference and training forward), which then ran in PyTorch.
    import torch

    from torch_max_backend import max_backend

    torch.manual_seed(0)
    eager = torch.nn.GroupNorm(16, 16)
    torch.nn.init.normal_(eager.weight)
    torch.nn.init.normal_(eager.bias)
    x = torch.randn(2, 16, 40)
    compiled = torch.compile(eager, backend=max_backend, options={"strict": True})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), eager(x))
    leaf, mine = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager(leaf).square().sum().backward()
    compiled(mine).square().sum().backward()
    torch.testing.assert_close(mine.grad, leaf.grad)
    assert [max_calls.of(k) for k in ("inference", "forward", "backward")] == [1, 1, 1]


def test_training_layer_norm_is_one_kernel_with_its_statistics(max_calls, graph_texts):
    # A training graph reads the mean and rstd (the backward's inputs): on
    # the CPU one kernel of ours gives them with the rows, where composed
    # they were two MAX reductions per layer norm.
    import torch

    def norms(x, w, b, img, h):
        aten = torch.ops.aten
        return (
            # 40 wide: the kernel's vector loop and its tail.
            *aten.native_layer_norm(x, [40], w, b, 1e-5),
            # Two normalized dims, without weight and bias, another epsilon.
            *aten.native_layer_norm(img, [4, 6], None, None, 1e-3),
            # Half precision is normalized in float32, as torch's kernels.
            *aten.native_layer_norm(h, [24], w[:24].bfloat16(), None, 1e-5),
        )

    torch.manual_seed(0)
    x = torch.randn(3, 5, 40) * 4 + 3
    # Rows holding NaN and infinities give NaN rows, as eager's.
    x[0, 1, 3] = float("nan")
    x[1, 2, 0] = float("inf")
    x[2, 3, :] = float("-inf")
    w, b = torch.randn(40), torch.randn(40)
    img = torch.randn(2, 3, 4, 6)
    h = torch.randn(7, 24, dtype=torch.bfloat16)
    compiled = torch.compile(
        norms, backend="max", fullgraph=True, options={"strict": True}
    )
    got, want = compiled(x, w, b, img, h), norms(x, w, b, img, h)
    for g, e in zip(got, want, strict=True):
        half = e.dtype == torch.bfloat16
        tolerance = {"rtol": 1.6e-2, "atol": 1e-2} if half else {}
        torch.testing.assert_close(g, e, equal_nan=True, **tolerance)
    # The rows holding NaN or an infinity are NaN in all three outputs.
    for output in got[:3]:
        assert output.reshape(15, -1)[[1, 7, 13]].isnan().all()
    assert max_calls.of("inference") == 1
    (text,) = graph_texts()
    assert text.count('"torch_max_backend_layer_norm"') == 3
    assert "rmo.mo.reduce" not in text
