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
