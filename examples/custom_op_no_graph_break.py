"""A Mojo kernel as a PyTorch op: eager, compiled without a graph break, trained.

    python examples/custom_op_no_graph_break.py [--beta 1.5] [--batch 32]

kernels/swish.mojo holds two MAX custom ops, Swish (x * sigmoid(beta * x))
and its derivative. ``torch_max_backend.mojo_op`` registers each as a
``torch.library`` op: called eagerly it runs the kernel through MAX; inside
``torch.compile(backend=max_backend)`` it is traced (its Python body
describes the output) and lowered to a MAX custom op in the same graph as
the layers around it, so Dynamo does not break the graph. The backward op
gives it a gradient. The script checks the op eagerly, compiled, and through
a training step against the same expression written in PyTorch, and that
Dynamo saw no graph break.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from common import (
    load_weights,
    median_ms,
    parser,
    print_timings,
    timed_first_call,
    verdict,
)

from torch_max_backend import max_backend, mojo_op

KERNELS = Path(__file__).resolve().parent / "kernels" / "swish.mojo"


@mojo_op("examples::swish", KERNELS)
def swish(x: torch.Tensor, beta: float) -> torch.Tensor:
    # Runs on fake tensors only: says what the kernel returns.
    return torch.empty_like(x)


@mojo_op("examples::swish_backward", KERNELS)
def swish_backward(grad: torch.Tensor, x: torch.Tensor, beta: float) -> torch.Tensor:
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output) -> None:
    x, beta = inputs
    ctx.save_for_backward(x)
    ctx.beta = beta


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return swish_backward(grad, x, ctx.beta), None


swish.register_autograd(_backward, setup_context=_setup_context)


def reference_swish(x: torch.Tensor, beta: float) -> torch.Tensor:
    return x * torch.sigmoid(beta * x)


class Net(torch.nn.Module):
    def __init__(self, activation, beta: float) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.fc2 = torch.nn.Linear(128, 10)
        self.activation, self.beta = activation, beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation(self.fc1(x), self.beta))


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--beta", type=float, default=1.5)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    model = Net(swish, args.beta)
    load_weights(model, args.weights)
    model = model.to(device)
    reference = Net(reference_swish, args.beta).to(device)
    reference.load_state_dict(model.state_dict())
    x = torch.randn(args.batch, 64, device=device)
    checks: dict[str, bool] = {}

    # 1. Eagerly: the kernel runs through MAX, one op at a time.
    h = torch.randn(args.batch, 128, device=device)
    got, want = swish(h, args.beta), reference_swish(h, args.beta)
    checks["eager op"] = torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    print(f"eager op: max abs diff from PyTorch {(got - want).abs().max():.2e}")

    # 2. Compiled: one graph, the kernel inside it.
    explanation = torch._dynamo.explain(model)(x)
    checks["no graph break"] = explanation.graph_break_count == 0
    print(
        f"Dynamo: {explanation.graph_count} graph(s), "
        f"{explanation.graph_break_count} graph break(s)"
    )
    compiled = torch.compile(model, backend=max_backend, options={"strict": True})
    with torch.no_grad():
        out, first_call_s = timed_first_call(lambda: compiled(x))
        expected = reference(x)
    checks["compiled"] = torch.allclose(out, expected, rtol=1e-5, atol=1e-5)
    print(f"compiled model: max abs diff {(out - expected).abs().max():.2e}")

    # 3. Training: the backward kernel gives the gradients.
    target = torch.randn(args.batch, 10, device=device)
    loss = torch.nn.functional.mse_loss(compiled(x), target)
    loss.backward()
    torch.nn.functional.mse_loss(reference(x), target).backward()
    diffs = [
        (a.grad - b.grad).abs().max().item()
        for a, b in zip(model.parameters(), reference.parameters(), strict=True)
    ]
    checks["gradients"] = max(diffs) < 1e-4
    print(f"gradients: max abs diff {max(diffs):.2e} over {len(diffs)} parameters")

    with torch.no_grad():
        eager_ms = median_ms(lambda: reference(x), args.runs, device)
        max_ms = median_ms(lambda: compiled(x), args.runs, device)
    print_timings(eager_ms, max_ms, first_call_s)
    for name, ok in checks.items():
        print(f"  {name}: {'ok' if ok else 'MISMATCH'}")
    return verdict(all(checks.values()), "the Mojo op eagerly, compiled and trained")


if __name__ == "__main__":
    sys.exit(main())
