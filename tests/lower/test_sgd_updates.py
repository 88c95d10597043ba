"""SGD-with-momentum parameter updates each run as one in-place kernel
(passes/sgd_updates.py, kernels/mojo_optimizer/sgd_step.mojo): the
parameter and its momentum buffer read and written once; the learning rate
and momentum are read from the update's numbers input, so a new rate
reuses the compiled graph; maximize's negated gradient is the kernel's
too, and the multi-tensor nesterov step's direction, written into the
gradients, another kernel's."""

from __future__ import annotations

import pytest
import torch
from graph_text import unread_inputs

from torch_max_backend import max_backend

from .optimizer_params import params_with_grads

KERNEL = "torch_max_backend_sgd_step"
DIRECTION_KERNEL = "torch_max_backend_sgd_direction_step"
SHAPES = [(40, 37), (5,), (3, 4, 6)]
# Whole vectors of half-precision values on any CPU (64 of them).
HALF_SHAPES = [(8, 64), (64,), (2, 2, 64)]


def _optimizer(
    shapes: list[tuple[int, ...]], dtype: torch.dtype = torch.float32, **options
) -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer]:
    """Parameters with gradients (the same for every call: seeded) and their
    SGD, its momentum buffers created as the benchmarks create them."""
    params = params_with_grads(shapes, dtype)
    generator = torch.Generator().manual_seed(1)
    optimizer = torch.optim.SGD(params, **options)
    for p in params:
        optimizer.state[p]["momentum_buffer"] = torch.randn(
            p.shape, generator=generator, dtype=dtype
        )
    return params, optimizer


def _steps_match_eager(
    shapes,
    rates=(0.1, 0.1, 0.1),
    dynamic: bool | None = None,
    exact: bool = False,
    **options,
) -> None:
    """One compiled step and one eager step per learning rate; parameters
    and momentum buffers then match (with ``exact``, bit for bit)."""
    close = {"rtol": 0, "atol": 0} if exact else {}
    params, optimizer = _optimizer(shapes, lr=rates[0], **options)
    expected, reference = _optimizer(shapes, lr=rates[0], **options)
    step = torch.compile(optimizer.step, backend=max_backend, dynamic=dynamic)
    for rate in rates:
        for group in (*optimizer.param_groups, *reference.param_groups):
            group["lr"] = rate
        step()
        reference.step()
    for p, q in zip(params, expected, strict=True):
        torch.testing.assert_close(p, q, **close)
        torch.testing.assert_close(
            optimizer.state[p]["momentum_buffer"],
            reference.state[q]["momentum_buffer"],
            **close,
        )


@pytest.mark.parametrize(
    "options",
    [
        {"momentum": 0.9},
        {"momentum": 0.9, "nesterov": True},
        {"momentum": 0.8, "weight_decay": 0.05, "nesterov": True},
        {"momentum": 0.7, "weight_decay": 0.01, "dampening": 0.25},
    ],
    ids=["momentum", "nesterov", "nesterov-decay", "dampening-decay"],
)
def test_each_update_is_one_kernel_and_matches_eager(options, graph_texts):
    """Bit for bit: the kernel computes each of torch's ``add(x, y,
    alpha=a)`` as one fused multiply-add, as torch's vectorized loop does."""
    _steps_match_eager(SHAPES, exact=True, **options)
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(SHAPES)
    assert "mo.mutable.store" not in text  # nothing stored op by op
    # The rate and momentum are each update's numbers input, read by its
    # kernel; no number of a replaced op is left as an input nothing reads.
    assert unread_inputs(text) == []


@pytest.mark.parametrize(
    "form", [{"dynamic": True}, {"foreach": True}], ids=["dynamic", "foreach"]
)
def test_other_forms_of_the_step_keep_the_kernel(form, graph_texts):
    """Under ``torch.compile(dynamic=True)`` Dynamo hands the momentum to
    the graph as a one-element tensor and ``1 - dampening`` as a symbolic
    number; ``foreach=True`` updates by list ops, unrolled per parameter
    (passes/foreach_unroll.py). Each update is still our kernel."""
    _steps_match_eager(SHAPES, momentum=0.7, weight_decay=0.01, dampening=0.25, **form)
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(SHAPES)
    assert "mo.mutable.store" not in text


def test_a_foreach_nesterov_step_writes_the_gradients_in_the_kernel(graph_texts):
    """Multi-tensor nesterov (without weight decay or maximize, which give
    it gradients of its own) also writes the new direction into the
    gradients: a kernel of its own writes them in the same pass, and they
    match eager's."""
    params, optimizer = _optimizer(
        SHAPES, lr=0.1, momentum=0.9, nesterov=True, foreach=True
    )
    expected, reference = _optimizer(
        SHAPES, lr=0.1, momentum=0.9, nesterov=True, foreach=True
    )
    torch.compile(optimizer.step, backend=max_backend)()
    reference.step()
    for p, q in zip(params, expected, strict=True):
        torch.testing.assert_close(p, q)
        torch.testing.assert_close(p.grad, q.grad)
        torch.testing.assert_close(
            optimizer.state[p]["momentum_buffer"], reference.state[q]["momentum_buffer"]
        )
    (text,) = graph_texts()
    assert text.count(f'"{DIRECTION_KERNEL}"') == len(SHAPES)
    assert "mo.mutable.store" not in text


def test_a_new_learning_rate_reuses_the_compiled_graph(graph_texts):
    """Dynamo traces the step again for a new rate (a Python float); the
    MAX graph is the same text, so its compiled artifact is reused."""
    _steps_match_eager(SHAPES[:2], rates=(0.1, 0.1, 0.03), momentum=0.9)
    first, second = graph_texts()
    assert first == second
    assert first.count(f'"{KERNEL}"') == 2


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
def test_maximize_is_the_kernels(foreach, graph_texts):
    """maximize negates the gradient before the weight decay is added: the
    kernel does so itself (``maximize``)."""
    _steps_match_eager(
        SHAPES, momentum=0.9, weight_decay=0.05, maximize=True, foreach=foreach
    )
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}", parameters = {{maximize = true}}') == len(SHAPES)
    assert "mo.mutable.store" not in text


@pytest.mark.parametrize(
    ("dtype", "dynamic", "options"),
    [
        (
            torch.bfloat16,
            None,
            {"momentum": 0.8, "weight_decay": 0.05, "nesterov": True},
        ),
        (torch.float16, None, {"momentum": 0.7, "dampening": 0.25, "maximize": True}),
        (torch.bfloat16, True, {"momentum": 0.9}),
    ],
    ids=["bfloat16-nesterov-decay", "float16-dampening-maximize", "bfloat16-dynamic"],
)
def test_half_precision_values_are_the_kernels(dtype, dynamic, options, graph_texts):
    """bfloat16 and float16 parameters update on the kernel too, computed
    in float32 and rounded after each op as eager's ops round (an ``add``'s
    alpha rounded to the values' type first, as eager rounds it): eager's
    values bit for bit. (Sizes in whole vectors: eager's scalar loop over a
    vector's remainder rounds otherwise than its vector loop.) Under
    ``dynamic=True`` the momentum is a float32 tensor whose product with
    the buffer is cast to the buffer's type: the kernel's too."""
    _steps_match_eager(HALF_SHAPES, dtype=dtype, exact=True, dynamic=dynamic, **options)
    (text,) = graph_texts()
    flags = f"maximize = {str(options.get('maximize', False)).lower()}"
    assert text.count(f'"{KERNEL}", parameters = {{{flags}}}') == len(HALF_SHAPES)
    assert "mo.mutable.store" not in text
