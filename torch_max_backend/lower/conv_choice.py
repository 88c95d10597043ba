"""Which way a float32 convolution on the CPU is built: measured, per machine and shape.

Of the convolution strategies (lower/ops/convolution.py), two take a large
image in the channels-last layout: our register-tiled kernel (``tiled``,
lower/conv_kernel.py) and MAX's conv2d (``direct``). Which is faster depends
on the machine (kernels/conv_timing.py), so, as products are
(lower/product_choice.py), each convolution that both fit is timed once per
machine and shape, and the faster is kept in the storage cache beside the
product choices: a second process reads it instead of timing again, another
machine times anew. The choice is part of the graph's fingerprint
(builder/fingerprint.py) and shown by ``explain()``.

im2col and a product (``im2col_matmul``) keep their rule: outputs of at
most 16x16 pixels and filters of 2^20 elements or more. Both kernels above
lost to it there on every machine measured (an AMD EPYC Zen 3, the Zen 4,
an Intel Xeon; the table in lower/ops/convolution.py), and timing it would
compile a graph per filter size and padding.

The setting ``conv_strategy`` (``TORCH_MAX_BACKEND_CONV_STRATEGY``)
overrides: ``"auto"`` (measure, the default), ``"rule"`` (no timing: our
kernel on a CPU without AVX-512, where it was measured faster, MAX's conv2d
on one with it), or one strategy's name for every convolution it fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..settings import CONV_STRATEGIES
from ..storage.bundle import host_cpu
from .kit import arg_tensor, node_arg, size_hint
from .product_choice import timed_choice
from .registry import Strategy
from .transposed_conv import pair

AUTO = "auto"
TIMED = ("tiled", "direct")

_setting = AUTO


def set_conv_strategy(value: str) -> None:
    """Process-wide: the latest compile's ``conv_strategy`` applies."""
    global _setting
    if value not in CONV_STRATEGIES:
        raise ValueError(
            f"unknown conv_strategy {value!r}; known: {', '.join(CONV_STRATEGIES)}"
        )
    _setting = value


def cpu_has_avx512() -> bool:
    """Whether this machine's CPU has AVX-512 (False where its flags cannot
    be read)."""
    return "avx512f" in host_cpu()[1]


@dataclass(frozen=True)
class ConvShape:
    """A 2-d convolution as the kernels see it: the padded channels-last
    image [N, H, W, C], the filter [kh, kw, C, O], stride and dilation."""

    image: tuple[int, int, int, int]
    filter_size: tuple[int, int, int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]

    def key(self, forms: Sequence[str]) -> str:
        return (
            f"conv {'x'.join(map(str, self.image))} "
            f"{'x'.join(map(str, self.filter_size))} "
            f"s{self.stride[0]}x{self.stride[1]} "
            f"d{self.dilation[0]}x{self.dilation[1]} {','.join(sorted(forms))}"
        )


def conv_shape(node: torch.fx.Node) -> ConvShape | None:
    """The shape ``node`` (an aten.convolution of 1 or 2 spatial dims) is
    timed at: its traced sizes, a 1-d one over a height of 1; None where a
    size is unknown."""
    input, weight = arg_tensor(node, 0, "input"), arg_tensor(node, 1, "weight")
    sizes = [size_hint(s) for s in (*input.shape, *weight.shape)]
    if any(s is None for s in sizes) or weight.dim() not in (3, 4):
        return None
    stride = list(node_arg(node, 3, "stride", [1]))
    padding = list(node_arg(node, 4, "padding", [0]))
    dilation = list(node_arg(node, 5, "dilation", [1]))
    if weight.dim() == 3:  # as a 2-d one over a height of 1
        sizes = [*sizes[:2], 1, sizes[2], *sizes[3:5], 1, sizes[5]]
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
    n, c, h, w, o, _, kh, kw = sizes
    (ph, pw), (sh, sw), (dh, dw) = pair(padding, 0), pair(stride, 1), pair(dilation, 1)
    return ConvShape((n, h + 2 * ph, w + 2 * pw, c), (kh, kw, c, o), (sh, sw), (dh, dw))


def measured(shape: ConvShape, forms: list[str]) -> str | None:
    """The fastest of ``forms`` for ``shape`` here, timed on first use; None
    when timing failed (the rule decides then)."""
    from ..kernels.conv_timing import time_conv_forms

    return timed_choice(
        "convolutions",
        shape.key(forms),
        forms,
        lambda: time_conv_forms(
            shape.image, shape.filter_size, shape.stride, shape.dilation, forms
        ),
    )


def _by_rule(by_name: dict[str, Strategy], first: Strategy) -> Strategy:
    """The fixed rule: the first that fits, except that a CPU with AVX-512
    keeps MAX's conv2d where our kernel would come first."""
    if first.name == "tiled" and "direct" in by_name and cpu_has_avx512():
        return by_name["direct"]
    return first


def choose_conv(node: torch.fx.Node, fitting: Sequence[Strategy]) -> Strategy:
    """A chooser for ``lowering_strategies``: the setting's strategy where it
    fits, else (``auto``) the faster of our kernel and MAX's conv2d measured
    for the node's shape where the rules would take either, else the rule."""
    by_name = {s.name: s for s in fitting}
    if _setting in by_name:
        return by_name[_setting]
    rule = _by_rule(by_name, fitting[0])
    if _setting != AUTO or fitting[0].name != "tiled" or "direct" not in by_name:
        return rule
    # Our kernel fits only float32 convolutions on the CPU (conv_kernel.py).
    shape = conv_shape(node)
    if shape is None:
        return rule
    best = measured(shape, list(TIMED))
    return by_name.get(best, rule) if best is not None else rule
