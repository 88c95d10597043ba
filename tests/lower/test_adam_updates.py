"""Adam and AdamW parameter updates each run as one in-place kernel
(passes/adam_updates.py, kernels/mojo_optimizer/adam_step.mojo): the
parameter and its two moments read and written once, whatever the
mutated-input budget; the
step count and its bias corrections as one more (passes/adam_counts.py,
kernels/mojo_optimizer/adam_count.mojo); amsgrad's largest second moment
and maximize's negated gradient in the same pass; what the patterns do not
cover (float64 parameters, a count read elsewhere) is lowered op by op."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from graph_text import unread_inputs

from torch_max_backend import max_backend
from torch_max_backend.lower.passes.findings import GraphFindings
from torch_max_backend.lower.passes.optimizer_updates import find_optimizer_updates

from .aten_graphs import aten_graphs
from .optimizer_params import params_with_grads

KERNEL = "torch_max_backend_adam_step"
AMSGRAD_KERNEL = "torch_max_backend_adam_amsgrad_step"
COUNT = "torch_max_backend_adam_count"
SHAPES = [(40, 37), (5,), (3, 4, 6)]
# Whole vectors of values on any CPU (64 of them): eager's scalar loop over
# a vector's remainder rounds otherwise than its vector loop.
VECTOR_SHAPES = [(8, 64), (64,), (2, 2, 64)]


def _channels_last(p: torch.nn.Parameter) -> torch.nn.Parameter:
    """``p`` laid out as ``model.to(memory_format=torch.channels_last)`` lays
    out a 4-d parameter, its gradient left contiguous (as our backward
    gives it). A depthwise filter [C, 1, kh, kw] gets strides (kh * kw, 1,
    kw, 1): torch's ``contiguous`` would keep (kh * kw, kh * kw, kw, 1),
    the same memory order."""
    if p.dim() != 4:
        return p
    _, c, h, w = p.shape
    laid = torch.empty_strided(p.shape, (c * h * w, 1, w * c, c))
    moved = torch.nn.Parameter(laid.copy_(p.detach()))
    moved.grad = p.grad
    return moved


def _optimizer(
    kind: str,
    shapes: list[tuple[int, ...]],
    lr: object = 1e-2,
    channels_last: bool = False,
    dtype: torch.dtype = torch.float32,
    **options,
) -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer]:
    """Parameters with gradients (the same for every call: seeded) and their
    optimizer, its state set as its first step would create it, but for
    amsgrad's largest second moment: random, so that it exceeds the new
    second moment in some places and not in others; with
    ``channels_last``, 4-d parameters and their state laid out so."""
    params = params_with_grads(shapes, dtype)
    generator = torch.Generator().manual_seed(2)
    if channels_last:
        params = [_channels_last(p) for p in params]
    make = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    optimizer = make(params, lr=lr, **options)
    for p in params:
        state = optimizer.state[p]
        state.update(
            # float64 where torch.set_default_dtype(torch.float64) makes it
            # so, else float32 (half-precision parameters' too)
            step=torch.tensor(
                0.0, dtype=torch.float64 if dtype == torch.float64 else torch.float32
            ),
            exp_avg=torch.zeros_like(p),
            exp_avg_sq=torch.zeros_like(p),
        )
        if options.get("amsgrad"):
            # A first step's second moments are about 1e-3 * grad ** 2.
            largest = torch.rand(p.shape, generator=generator, dtype=dtype)
            state["max_exp_avg_sq"] = largest * 2e-3
    return params, optimizer


def _steps_match_eager(
    kind: str,
    shapes,
    rates=(None,) * 3,
    dynamic: bool | None = None,
    eager_options: dict | None = None,
    param_close: dict | None = None,
    **options,
) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
    """One compiled step and one eager step per rate (a tensor learning
    rate set to it first, where given); parameters and state then match.
    The eager optimizer takes ``eager_options`` where given, else
    ``options``; the parameters are compared with ``param_close``'s
    tolerances where given. Strict: no op of the step runs in PyTorch.
    Returns the compiled step's optimizer and eager's."""
    params, optimizer = _optimizer(kind, shapes, **options)
    expected, reference = _optimizer(kind, shapes, **(eager_options or options))
    step = torch.compile(
        optimizer.step, backend=max_backend, dynamic=dynamic, options={"strict": True}
    )
    for rate in rates:
        if rate is not None:
            for group in (*optimizer.param_groups, *reference.param_groups):
                group["lr"].fill_(rate)
        step()
        reference.step()
    for p, q in zip(params, expected, strict=True):
        torch.testing.assert_close(p, q, **(param_close or {}))
        assert optimizer.state[p].keys() == reference.state[q].keys()
        for key, value in optimizer.state[p].items():
            torch.testing.assert_close(value, reference.state[q][key])
    return optimizer, reference


@pytest.mark.parametrize("kind", ["adamw", "adam"])
def test_each_update_is_one_kernel_and_matches_eager(kind, graph_texts):
    """Three steps, so the count kernel's in-place count is read back."""
    _steps_match_eager(kind, SHAPES)
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(SHAPES)
    assert text.count(f'"{COUNT}", parameters = {{lr_divides = false}}') == len(SHAPES)
    # No step arithmetic op by op, no count returned to copy back, and no
    # lifted number of a replaced op left as an input nothing reads.
    assert "rmo.pow" not in text
    assert "result_names = []" in text
    assert unread_inputs(text) == []


def test_a_tensor_learning_rate_is_read_at_each_call(graph_texts):
    """With lr a tensor (as docs/usage.md advises for schedulers), the decay
    is computed in the graph and handed to the kernel; a new rate needs no
    new compile."""
    rates = (1e-2, 1e-2, 3e-3)
    _steps_match_eager("adamw", SHAPES, rates, lr=torch.tensor(1e-2))
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(SHAPES)
    # torch divides the rate by the bias correction here.
    assert text.count(f'"{COUNT}", parameters = {{lr_divides = true}}') == len(SHAPES)


@pytest.mark.parametrize("kind", ["adamw", "adam"])
def test_numbers_dynamo_made_inputs_keep_both_kernels(kind, graph_texts):
    """Under ``torch.compile(dynamic=True)`` Dynamo hands the step's Python
    floats (the second moment's beta, eps, the learning rate, the weight
    decay) to the graph as one-element tensors; the update and its count
    still run as our two kernels, reading them at each call."""
    _steps_match_eager(kind, SHAPES, dynamic=True, weight_decay=0.03)
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(SHAPES)
    assert text.count(f'"{COUNT}", parameters = {{lr_divides = false}}') == len(SHAPES)
    assert "rmo.pow" not in text


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
def test_adams_own_weight_decay_is_the_kernels(foreach, graph_texts):
    """Adam's weight decay adds ``wd * param`` to the gradient (coupled,
    unlike AdamW's): the kernel does so itself (``coupled_decay``), the
    gradient still read once."""
    _steps_match_eager("adam", SHAPES, weight_decay=0.05, foreach=foreach)
    (text,) = graph_texts()
    assert text.count(
        f'"{KERNEL}", parameters = {{coupled_decay = true, maximize = false}}'
    ) == len(SHAPES)
    assert text.count(f'"{COUNT}"') == len(SHAPES)


@pytest.mark.parametrize("kind", ["adamw", "adam"])
def test_a_foreach_step_runs_the_for_loop_steps_kernels(kind, graph_texts):
    """``foreach=True`` (PyTorch's default for CUDA parameters) updates by
    list ops; unrolled per parameter and its denominators rebuilt in the
    for-loop form (passes/foreach_unroll.py, foreach_adam.py), each update
    and its count are our kernels again."""
    _steps_match_eager(kind, SHAPES, foreach=True)
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(SHAPES)
    assert text.count(f'"{COUNT}", parameters = {{lr_divides = false}}') == len(SHAPES)
    assert "rmo.pow" not in text


def test_a_foreach_step_with_a_tensor_learning_rate_reads_it(graph_texts):
    """A tensor rate needs ``capturable=True`` in the foreach form; the
    rebuilt denominators divide by it as the for-loop form does."""
    # Eager takes capturable only on accelerators: against the for-loop
    # form, whose results ours equal.
    _steps_match_eager(
        "adamw",
        SHAPES,
        (1e-2, 1e-2, 3e-3),
        eager_options={"lr": torch.tensor(1e-2)},
        lr=torch.tensor(1e-2),
        foreach=True,
        capturable=True,
    )
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(SHAPES)
    assert text.count(f'"{COUNT}", parameters = {{lr_divides = true}}') == len(SHAPES)


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
def test_amsgrad_is_the_kernels(foreach, graph_texts):
    """amsgrad divides by the largest second moment so far, one more state
    tensor: the amsgrad kernel reads and writes it in the same pass, in
    either form (the foreach form's ``_foreach_maximum_`` unrolled)."""
    _steps_match_eager("adamw", SHAPES, foreach=foreach, amsgrad=True)
    (text,) = graph_texts()
    assert text.count(f'"{AMSGRAD_KERNEL}"') == len(SHAPES)
    assert text.count(f'"{COUNT}"') == len(SHAPES)
    assert "mo.mutable.store" not in text  # nothing stored op by op


def test_amsgrad_keeps_a_nan_as_torch_maximum_does(graph_texts):
    """A NaN gradient makes the largest second moment NaN there, as
    torch.maximum does. The kernel tells NaNs by their bits: MAX compiles
    kernels with fast-math flags, under which ``v != v`` was folded to
    false and the state kept its old largest value without a word."""
    params, optimizer = _optimizer("adamw", SHAPES, amsgrad=True)
    expected, reference = _optimizer("adamw", SHAPES, amsgrad=True)
    for p in (*params, *expected):
        p.grad.view(-1)[:3] = float("nan")
    torch.compile(optimizer.step, backend=max_backend)()
    reference.step()
    for p, q in zip(params, expected, strict=True):
        torch.testing.assert_close(p, q, equal_nan=True)
        for key, value in optimizer.state[p].items():
            torch.testing.assert_close(value, reference.state[q][key], equal_nan=True)
        assert optimizer.state[p]["max_exp_avg_sq"].isnan().sum() == 3
    (text,) = graph_texts()
    assert text.count(f'"{AMSGRAD_KERNEL}"') == len(SHAPES)


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
def test_maximize_is_the_kernels(foreach, graph_texts):
    """maximize negates the gradient before everything else, Adam's own
    weight decay included: the kernel does so itself (``maximize``)."""
    _steps_match_eager(
        "adam", SHAPES, foreach=foreach, maximize=True, weight_decay=0.05
    )
    (text,) = graph_texts()
    flags = "coupled_decay = true, maximize = true"
    assert text.count(f'"{KERNEL}", parameters = {{{flags}}}') == len(SHAPES)
    assert "mo.mutable.store" not in text


def test_the_moments_are_eagers_bit_for_bit(graph_texts):
    """The kernel computes each moment in the order of eager's kernels (its
    lerp, then its addcmul as one fused multiply-add of ``w2 * grad`` and
    ``grad``): both moments equal eager's bit for bit. (The parameters do
    not: eager's for-loop step computes its bias corrections in double
    precision.)"""
    optimizer, reference = _steps_match_eager("adamw", VECTOR_SHAPES)
    compiled = optimizer.param_groups[0]["params"]
    for p, q in zip(compiled, reference.param_groups[0]["params"], strict=True):
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(optimizer.state[p][key], reference.state[q][key])
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(VECTOR_SHAPES)


@pytest.mark.parametrize(
    ("kind", "dtype", "options"),
    [
        ("adam", torch.bfloat16, {"amsgrad": True}),
        ("adamw", torch.float16, {"eps": 1e-3, "maximize": True}),
        ("adam", torch.bfloat16, {"weight_decay": 0.05, "foreach": True}),
        ("adamw", torch.bfloat16, {"weight_decay": 0.1, "dynamic": True}),
    ],
    ids=[
        "adam-bfloat16-amsgrad",
        "adamw-float16-maximize",
        "adam-decay-foreach",
        "adamw-dynamic",
    ],
)
def test_half_precision_values_are_the_kernels(kind, dtype, options, graph_texts):
    """bfloat16 and float16 parameters update on the kernels too, computed
    in float32 and rounded where eager's ops round: the for-loop step's
    moments are eager's bit for bit (sizes in whole vectors: eager's scalar
    loop over a vector's remainder rounds otherwise). The parameters are
    within their type's default tolerance, or 2 % of a step (a parameter
    near 0 has an absolute rounding of its own): the compiled step's
    denominator, scaled by the step size, rounds otherwise than eager's,
    and float16's smallest second moments are subnormal. (eps 1e-3 for
    float16: the default 1e-8 is 0 there, and eager's parameters become
    infinite.) Under ``dynamic=True`` AdamW's decay and beta2 are float32
    tensors whose products with the values are cast to their type: the
    kernel's too."""
    # torch's default relative tolerance, or the learning rate's 2 %
    rtol = {torch.bfloat16: 1.6e-2, torch.float16: 1e-3}[dtype]
    close = {"rtol": rtol, "atol": 0.02 * 1e-2}
    optimizer, reference = _steps_match_eager(
        kind, VECTOR_SHAPES, dtype=dtype, param_close=close, **options
    )
    if not (options.get("foreach") or (kind == "adam" and options.get("weight_decay"))):
        # Not where a moment reads the parameter (Adam's own weight decay),
        # nor the list ops: eager's in-place ones round a multiplier to the
        # values' type, the compiled (functional) step's do not.
        compiled = optimizer.param_groups[0]["params"]
        for p, q in zip(compiled, reference.param_groups[0]["params"], strict=True):
            for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                if key in reference.state[q]:
                    assert torch.equal(optimizer.state[p][key], reference.state[q][key])
    (text,) = graph_texts()
    kernel = AMSGRAD_KERNEL if options.get("amsgrad") else KERNEL
    assert text.count(f'"{kernel}"') == len(VECTOR_SHAPES)
    assert "mo.mutable.store" not in text


def test_the_updates_numbers_are_graph_inputs(graph_texts):
    """The update's plain numbers (AdamW's decay 1 - lr * weight_decay, the
    moments' weights 1 - beta) reach the kernel as a graph input, not as
    constants: optimizers that differ only in them build the same MAX graph
    (one compile serves both), and MAX folds no constants at compile time
    (a constant-folding compile of its own)."""
    for weight_decay, betas in ((0.1, (0.9, 0.999)), (0.02, (0.8, 0.99))):
        torch._dynamo.reset()
        options = {"lr": 1e-2, "weight_decay": weight_decay, "betas": betas}
        params, optimizer = _optimizer("adamw", SHAPES, **options)
        expected, reference = _optimizer("adamw", SHAPES, **options)
        torch.compile(optimizer.step, backend=max_backend)()
        reference.step()
        for p, q in zip(params, expected, strict=True):
            torch.testing.assert_close(p, q)
            for key in ("exp_avg", "exp_avg_sq", "step"):
                torch.testing.assert_close(
                    optimizer.state[p][key], reference.state[q][key]
                )
    first, second = graph_texts()
    assert first == second
    assert first.count(f'"{KERNEL}"') == len(SHAPES)
    assert "tensor<1xf32>" not in first  # no one-element constant


def test_updates_past_the_buffer_budget_are_kernels_too(graph_texts):
    # 30 parameters: 120 mutated inputs, past MAX_BUFFERS (24) stores.
    _steps_match_eager("adamw", [(7, i + 1) for i in range(30)])
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == 30


def test_a_depthwise_filter_laid_out_channels_last_is_one_kernel(graph_texts):
    """A channels-last depthwise filter's strides differ from its
    contiguous gradient's in the size-1 dim alone; torch's lerp then copies
    the new first moment to the filter's strides (``prims.copy_strided``).
    That copy moves nothing in a graph of values: the update is still one
    kernel each, and nothing of the step runs in PyTorch (where a
    channels-last MobileNetV2's AdamW step had run 17 such copies, split
    the update graph and written every parameter back by copy)."""
    shapes = [(6, 1, 3, 3), (4, 3, 3, 3), (5,)]
    _steps_match_eager("adamw", shapes, channels_last=True)
    (text,) = graph_texts()
    assert text.count(f'"{KERNEL}"') == len(shapes)


def test_what_the_kernel_does_not_cover_is_lowered_as_written(graph_texts):
    """The kernels update float32 and half-precision values; a float64
    model's step is lowered op by op, with eager's results."""
    _steps_match_eager("adamw", SHAPES[:2], dtype=torch.float64, amsgrad=True)
    assert all("torch_max_backend_adam" not in text for text in graph_texts())


def _adamw_step(
    param, grad, exp_avg, exp_avg_sq, step, increment: int = 1, read_count=False
):
    """One AdamW update in the form torch's compiled single-tensor AdamW
    takes (torch/optim/adam.py, capturable branch), counting by
    ``increment``; with ``read_count``, the new count is read after it."""
    step.add_(increment)
    param.mul_(1 - 1e-2 * 1e-2)
    exp_avg.lerp_(grad, 1 - 0.9)
    exp_avg_sq.mul_(0.999).addcmul_(grad, grad, value=1 - 0.999)
    negative_size = (1e-2 / (1 - 0.9**step)).neg()
    root_correction = (1 - 0.999**step).sqrt()
    denominator = (exp_avg_sq.sqrt() / (root_correction * negative_size)).add_(
        1e-8 / negative_size
    )
    param.addcdiv_(exp_avg, denominator)
    return step * 2 if read_count else None


@pytest.mark.parametrize(
    ("options", "counted"),
    [({}, True), ({"increment": 2}, False), ({"read_count": True}, False)],
    ids=["torch's count", "counting by two", "count read after"],
)
def test_only_torchs_count_read_by_the_update_alone_is_the_kernels(options, counted):
    """The count kernel takes the count and its bias corrections where they
    are torch's chain and nothing else reads them; otherwise the update is
    still our kernel and the count stays op by op."""
    shape = (5, 3)
    inputs = [torch.randn(shape) for _ in range(4)] + [torch.tensor(0.0)]
    step = partial(_adamw_step, **options)
    (gm,) = aten_graphs(step, *inputs, keep_inference_input_mutations=True)
    updates = list(find_optimizer_updates(gm, GraphFindings()).values())
    assert [u.kernel for u in updates] == [KERNEL]
    assert (updates[0].count is not None) is counted
