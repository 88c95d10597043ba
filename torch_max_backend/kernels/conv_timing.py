"""Timing the ways a float32 2-d convolution over a large image can run on the CPU.

Two kernels take a convolution in the channels-last layout, and which is
faster depends on the machine: on an AMD EPYC Zen 3 (AVX2) our register-tiled
kernel ran ResNet-18's large layers 1.4-2.1x faster than MAX 26.7's conv2d
(docs/benchmarks.md, "Convolutions by our kernel"), and on the AVX-512
machines measured before, MAX's conv2d ran them at PyTorch's speed. The
forms, by the names of the convolution strategies that build them
(lower/ops/convolution.py):

- ``tiled``: our kernel (kernels/mojo_conv/tiled_conv.mojo);
- ``direct``: MAX's conv2d.

Each form is a slot of a small MAX graph for its stride and dilation (the
kernels' compile-time parameters) with symbolic sizes: input [N, H, W, C],
already padded, and filter [kh, kw, C, O] (RSCF). Strides 1 and 2 without
dilation share one graph; each other stride and dilation has one of its
own. A graph is compiled once per machine and kept as an artifact that
later processes load in milliseconds (timing_graphs.py), and run here at the
sizes asked, so timing a new shape costs milliseconds, not a compile.
The forms run interleaved, round after round, each result checked against
the first form's before any is timed, and each keeps its median.
"""

from __future__ import annotations

import threading

import torch
from max.driver import Buffer
from max.engine import Model
from max.graph import DeviceRef, Graph, Module, TensorType, TensorValue, ops
from max.graph.type import ConvInputLayout, FilterLayout

from ..dtypes import to_max_dtype
from .product_timing import interleaved_medians
from .tiled_conv import tiled_conv
from .timing_graphs import load_timing_graphs

FORMS = ("tiled", "direct")
# Rounds at least, and the time they may take together, per shape.
_MIN_ROUNDS = 3
_BUDGET_S = 0.5

_lock = threading.Lock()

Pair = tuple[int, int]
# One kernel of a timing graph: its form, stride and dilation.
Slot = tuple[str, Pair, Pair]
_models: dict[tuple[Slot, ...], Model] = {}


def _build(
    form: str, x: TensorValue, w: TensorValue, stride: Pair, dilation: Pair
) -> TensorValue:
    if form == "direct":
        return ops.conv2d(
            x,
            w,
            stride=stride,
            dilation=dilation,
            padding=(0, 0, 0, 0),
            input_layout=ConvInputLayout.NHWC,
            filter_layout=FilterLayout.RSCF,
        )
    if form == "tiled":
        return tiled_conv(x, w, stride, dilation)
    raise ValueError(f"unknown convolution form {form!r}; known: {', '.join(FORMS)}")


# The usual strides share one graph: a new MAX graph's fixed compile cost
# (about 19 s) is paid once for the four kernels, not once for each (on an
# AMD EPYC Zen 3, 106 s as four graphs from an empty cache).
SHARED: tuple[Slot, ...] = tuple(
    (form, stride, (1, 1)) for stride in ((1, 1), (2, 2)) for form in FORMS
)
# What a slot not being timed is given: one value, a 1x1 filter.
_IDLE = ((1, 1, 1, 1), (1, 1, 1, 1))


def _slots(stride: Pair, dilation: Pair) -> tuple[Slot, ...]:
    """The slots of the graph that times ``stride`` and ``dilation``."""
    if (FORMS[0], stride, dilation) in SHARED:
        return SHARED
    return tuple((form, stride, dilation) for form in FORMS)


def _model(slots: tuple[Slot, ...]) -> Model:
    """The compiled graph of ``slots``, each a form with inputs and an output
    of its own (symbolic sizes), compiled or loaded once."""
    if slots not in _models:
        cpu = DeviceRef.CPU()
        operand = to_max_dtype(torch.float32)
        name = "conv_timing_" + "_".join(
            f"{form}_s{s[0]}x{s[1]}_d{d[0]}x{d[1]}" for form, s, d in slots
        )
        types = []
        for i in range(len(slots)):
            types.append(TensorType(operand, [f"n{i}", f"h{i}", f"w{i}", f"c{i}"], cpu))
            types.append(
                TensorType(operand, [f"kh{i}", f"kw{i}", f"c{i}", f"o{i}"], cpu)
            )

        def build(module: Module | None) -> Graph:
            with Graph(name, input_types=types, module=module) as graph:
                values = [v.tensor for v in graph.inputs]
                graph.output(
                    *(
                        _build(form, values[2 * i], values[2 * i + 1], s, d)
                        for i, (form, s, d) in enumerate(slots)
                    )
                )
            return graph

        _models[slots] = load_timing_graphs({name: build})[name]
    return _models[slots]


def time_conv_forms(
    image: tuple[int, int, int, int],
    filter_size: tuple[int, int, int, int],
    stride: Pair,
    dilation: Pair,
    forms: list[str],
) -> dict[str, float]:
    """Median microseconds of a float32 convolution of a padded channels-last
    ``image`` [N, H, W, C] with a ``filter_size`` [kh, kw, C, O] filter in
    each of ``forms``; every form's result is checked against the first's
    before it is timed. A form's time includes the graph's other slots run
    on one value each (some microseconds, the same for every form)."""
    with _lock:
        slots = _slots(stride, dilation)
        model = _model(slots)
        gen = torch.Generator().manual_seed(0)
        x = Buffer.from_dlpack(torch.randn(*image, generator=gen))
        w = Buffer.from_dlpack(torch.randn(*filter_size, generator=gen))
        idle = [Buffer.from_dlpack(torch.ones(*size)) for size in _IDLE]
        calls: dict[str, tuple[list[Buffer], int]] = {}
        for form in forms:
            at = slots.index((form, stride, dilation))
            inputs = [
                b for i in range(len(slots)) for b in ((x, w) if i == at else idle)
            ]
            calls[form] = (inputs, at)
        terms = filter_size[0] * filter_size[1] * filter_size[2]
        reference = None
        for form, (inputs, at) in calls.items():
            result = torch.from_dlpack(model._execute_device_tensors(inputs)[at])
            if reference is None:
                reference = result.clone()
            elif result.shape != reference.shape or not torch.allclose(
                result, reference, rtol=1e-3, atol=1e-3 * terms
            ):
                raise RuntimeError(
                    f"convolution form {form!r} disagrees with {forms[0]!r} for "
                    f"image {list(image)}, filter {list(filter_size)}, "
                    f"stride {stride}, dilation {dilation}"
                )
        return interleaved_medians(
            {
                form: lambda inputs=inputs: model._execute_device_tensors(inputs)
                for form, (inputs, _) in calls.items()
            },
            _MIN_ROUNDS,
            _BUDGET_S,
            max_rounds=100,
        )
