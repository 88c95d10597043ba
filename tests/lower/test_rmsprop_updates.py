"""RMSprop parameter updates each run as one in-place kernel
(passes/rmsprop_updates.py, kernels/mojo_optimizer/rmsprop_step.mojo): the
parameter and its square average read and written once, for the for-loop
and foreach forms, weight decay and maximize included, float32 and
half-precision values; RMSprop with momentum or centered is lowered op by
op."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import max_backend

from .optimizer_params import params_with_grads

KERNEL = "torch_max_backend_rmsprop_step"
SHAPES = [(40, 37), (5,), (3, 4, 6)]
# Whole vectors of half-precision values on any CPU (64 of them).
HALF_SHAPES = [(8, 64), (64,), (2, 2, 64)]


def _steps_match_eager(
    shapes: list[tuple[int, ...]],
    dtype: torch.dtype = torch.float32,
    dynamic: bool | None = None,
    exact_averages: bool = False,
    **options,
) -> None:
    """Three compiled steps and three eager ones from the same parameters,
    gradients and (torch-created) state; parameters and square averages
    then match (with ``exact_averages``, the averages bit for bit: the
    parameters' quotient is MAX's fast-math division, which may differ from
    eager's by one rounding)."""
    exact = {"rtol": 0, "atol": 0} if exact_averages else {}
    params = params_with_grads(shapes, dtype)
    expected = params_with_grads(shapes, dtype)
    optimizer = torch.optim.RMSprop(params, lr=1e-2, **options)
    reference = torch.optim.RMSprop(expected, lr=1e-2, **options)
    step = torch.compile(
        optimizer.step, backend=max_backend, dynamic=dynamic, options={"strict": True}
    )
    for _ in range(3):
        step()
        reference.step()
    # half-precision parameters: within one rounding of their own
    rounding = {"rtol": 2 * torch.finfo(dtype).eps, "atol": 1e-5}
    for p, q in zip(params, expected, strict=True):
        torch.testing.assert_close(p, q, **({} if dtype == torch.float32 else rounding))
        for key, value in optimizer.state[p].items():
            torch.testing.assert_close(value, reference.state[q][key], **exact)


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
def test_each_update_is_one_kernel_and_matches_eager(foreach, graph_texts):
    """Weight decay and maximize are the kernel's too."""
    _steps_match_eager(SHAPES, foreach=foreach, weight_decay=0.05, maximize=True)
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}", parameters = {{maximize = true}}') == len(SHAPES)
    # Stored op by op: only each parameter's step count (one float).
    stores = [line for line in text.splitlines() if "mo.mutable.store(" in line]
    assert len(stores) == len(SHAPES)
    assert all("(!mo.buffer<[], f32>" in line for line in stores)


@pytest.mark.parametrize(
    ("dtype", "dynamic", "options"),
    [
        (torch.float16, None, {"eps": 1e-3, "maximize": True}),
        (torch.bfloat16, True, {}),
    ],
    ids=["float16-maximize", "bfloat16-dynamic"],
)
def test_half_precision_values_are_the_kernels(dtype, dynamic, options, graph_texts):
    """Computed in float32 and rounded after each op as eager's ops round
    (an ``add``'s alpha rounded to the values' type first): eager's square
    averages bit for bit. Under ``dynamic=True`` alpha and eps are float32
    tensors, the products and sums with them cast back to the values'
    type. (eps 1e-3 for float16: the default 1e-8 is 0 there. No weight
    decay: the averages would then read parameters a rounding apart.)"""
    _steps_match_eager(HALF_SHAPES, dtype, dynamic, exact_averages=True, **options)
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(HALF_SHAPES)


@pytest.mark.parametrize(
    "options", [{"momentum": 0.9}, {"centered": True}], ids=["momentum", "centered"]
)
def test_what_the_kernel_does_not_cover_is_lowered_as_written(options, graph_texts):
    _steps_match_eager(SHAPES[:2], **options)
    assert all(KERNEL not in text for text in graph_texts())
