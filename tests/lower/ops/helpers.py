"""Compile a function with MAX, run it and eager PyTorch, compare every output."""

from __future__ import annotations

from collections.abc import Callable

import torch

from torch_max_backend import max_backend


def check_against_eager(
    fn: Callable[..., object],
    *args: torch.Tensor,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    """One MAX graph (fullgraph) must reproduce eager for each output: values, dtypes."""
    expected = fn(*args)
    got = torch.compile(
        fn, backend=max_backend, fullgraph=True, options={"strict": True}
    )(*args)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(
            g,
            e,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            msg=lambda m, i=i: f"output {i}: {m}",
        )


def check_training_step(
    model: torch.nn.Module,
    *inputs: torch.Tensor,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> None:
    """One step of ``model`` (fullgraph), eager and compiled on copies of
    everything: the loss, the inputs' and parameters' gradients and the
    buffers the step updated must match (buffers within torch's defaults
    unless tighter tolerances are given)."""
    torch.manual_seed(0)
    compiled_model = type(model)()
    compiled_model.load_state_dict(model.state_dict())
    eager_inputs = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    max_inputs = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    expected = model(*eager_inputs)
    expected.backward()
    got = torch.compile(compiled_model, backend=max_backend, fullgraph=True)(
        *max_inputs
    )
    got.backward()
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)
    for t_max, t_eager in zip(max_inputs, eager_inputs, strict=True):
        if t_eager.is_floating_point():
            torch.testing.assert_close(t_max.grad, t_eager.grad, rtol=rtol, atol=atol)
    for (name, p_max), p_eager in zip(
        compiled_model.named_parameters(), model.parameters(), strict=True
    ):
        torch.testing.assert_close(
            p_max.grad, p_eager.grad, rtol=rtol, atol=atol, msg=name
        )
    for (name, b_max), b_eager in zip(
        compiled_model.named_buffers(), model.buffers(), strict=True
    ):
        tight = {"rtol": rtol, "atol": atol} if rtol < 1e-4 else {}
        torch.testing.assert_close(b_max, b_eager, msg=name, **tight)
