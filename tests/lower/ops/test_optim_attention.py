"""Attention and optimizer ops in a compiled training loop, against eager.

Causal scaled-dot-product attention (forward and backward on CPU's flash
attention ops), gradient clipping (``linalg_vector_norm``, ``_foreach_norm``)
and foreach Adam and SGD with momentum (``_foreach_*`` ops, unrolled per
parameter), all on MAX.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.norm = torch.nn.LayerNorm(16)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm(x)).view(2, 6, 3, 2, 8).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(h.transpose(1, 2).reshape(2, 6, 16))


def _train(
    model: torch.nn.Module, compiled: bool, steps: int = 2
) -> list[torch.Tensor]:
    adam = torch.optim.Adam(model.out.parameters(), lr=0.01, foreach=True)
    sgd = torch.optim.SGD(
        [*model.qkv.parameters(), *model.norm.parameters()],
        lr=0.05,
        momentum=0.9,
        weight_decay=0.01,
        foreach=True,
    )
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(3))

    def step() -> torch.Tensor:
        adam.zero_grad()
        sgd.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
        adam.step()
        sgd.step()
        return loss.detach()

    run = torch.compile(step, backend=max_backend) if compiled else step
    return [run() for _ in range(steps)]


def test_attention_clipping_and_foreach_optimizers(max_calls, built_graphs):
    torch.manual_seed(0)
    eager = Attention()
    compiled = copy.deepcopy(eager)
    expected = _train(eager, compiled=False)
    got = _train(compiled, compiled=True)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(
        compiled.named_parameters(), eager.parameters(), strict=True
    ):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    assert max_calls.of("backward") >= 1
    ops = built_graphs.ops()
    for op in (
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
        "aten._foreach_norm.Scalar",
    ):
        assert any(s.startswith(op.rsplit(".", 1)[0]) for s in ops), op
    # The optimizers' list ops reached MAX unrolled into one op per
    # parameter (passes/foreach_unroll.py), Adam's addcdiv among them.
    assert not any(s.startswith("aten._foreach_addcdiv") for s in ops)
    assert "aten.div.Tensor" in ops
