"""Forward and backward lowerings together: one small training graph pair.

Activations, softmax, layer norm, embedding and the matmul family, with the
gradients of every parameter and input compared against eager autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8, bias=False)

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.embed(ids) + x)
        h = self.up(h)
        h = F.gelu(h) + F.gelu(h, approximate="tanh") + F.silu(h)
        h = torch.relu(h) + torch.sigmoid(h) * torch.tanh(h)
        h = self.down(h)
        attn = torch.softmax(h @ h.transpose(1, 2) / 8**0.5, dim=-1)
        h = torch.bmm(attn, h)
        return F.log_softmax(h, dim=1).mean() + F.softmax(h, dim=0).amax()


def test_training_graphs_match_eager_autograd(max_calls):
    torch.manual_seed(0)
    eager = Block()
    compiled_model = Block()
    compiled_model.load_state_dict(eager.state_dict())
    ids = torch.randint(0, 10, (2, 5))
    x_eager = torch.randn(2, 5, 8, requires_grad=True)
    x_max = x_eager.detach().clone().requires_grad_(True)

    expected = eager(ids, x_eager)
    expected.backward()
    got = torch.compile(compiled_model, backend=max_backend, fullgraph=True)(ids, x_max)
    got.backward()

    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x_max.grad, x_eager.grad, rtol=1e-4, atol=1e-5)
    for (name, p_max), p_eager in zip(
        compiled_model.named_parameters(), eager.parameters(), strict=True
    ):
        torch.testing.assert_close(
            p_max.grad, p_eager.grad, rtol=1e-4, atol=1e-5, msg=name
        )
    assert max_calls.of("forward") == 1
    assert max_calls.of("backward") == 1


def test_batch_norm_training_updates_running_stats(max_calls):
    # Training-mode batch norm reaches us as a functional op that PyTorch
    # decomposes (var_mean and friends); its running statistics are mutated
    # inputs written back after the MAX graph runs.
    torch.manual_seed(0)

    def make():
        return torch.nn.Sequential(
            torch.nn.Linear(4, 8),
            torch.nn.BatchNorm1d(8),
            torch.nn.ReLU(),
            torch.nn.Linear(8, 1),
        )

    eager, compiled_model = make(), make()
    compiled_model.load_state_dict(eager.state_dict())
    x = torch.randn(16, 4)
    expected = eager(x).sum()
    expected.backward()
    got = torch.compile(compiled_model, backend=max_backend)(x).sum()
    got.backward()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    bn_eager, bn_max = eager[1], compiled_model[1]
    torch.testing.assert_close(bn_max.running_mean, bn_eager.running_mean)
    torch.testing.assert_close(bn_max.running_var, bn_eager.running_var)
    for p_max, p_eager in zip(
        compiled_model.parameters(), eager.parameters(), strict=True
    ):
        torch.testing.assert_close(p_max.grad, p_eager.grad, rtol=1e-4, atol=1e-4)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
