"""Graph inputs laid out channels-last, taken as they lie: no copy at a call.

MAX takes dense row-major buffers, so the call path copied every input that
was not contiguous (runtime/compiled_graph.py, ``as_buffer``): for a model
converted with ``model.to(memory_format=torch.channels_last)``, its filters
(ResNet-18's 11 M floats) at every call, 9.7 ms of a 50 ms call (AMD EPYC
Zen 3, docs/benchmarks.md, "Channels-last models"). A channels-last tensor
[N, C, *spatial] is its [N, *spatial, C] permute, which is dense: the graph
takes that (flattened past N), the call path hands it over as a view (an
``InputKind.CHANNELS_LAST`` input), and the graph's value is the permute
back to N, C, *spatial with the N, *spatial, C input as its channels-last
twin (lower/layout.py), so that convolutions, poolings and pointwise ops
read it as it lies.

CPU graphs only (the GPU path keeps the copy, untimed there). An input the
graph writes is taken so only where our optimizer kernel alone writes it,
reading a gradient that is taken so too (``raw_updates``): the update is
elementwise, so the parameter, its state and its gradient are read and
written in their own memory order. Before, a channels-last model's
parameters and AdamW moments were copied to contiguous memory and back at
every step, and its gradients transposed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from max.graph import TensorValue, ops

from ..kit import size_hint
from ..layout import takes_channels_last, to_last
from ..passes import OptimizerUpdate

__all__ = ["channels_last_value", "raw_updates", "taken_shape", "takes_channels_last"]


def taken_shape(meta: torch.Tensor) -> list[int | torch.SymInt]:
    """The input's shape as the graph takes it: N, *spatial, C flattened past
    N. Flat, because MAX folds a transposed operand into its matmul only
    where the transpose reads a graph input, or a reshape that gives one
    back: a channels-last filter read as [O, kh * kw * C] through a reshape
    of a 4-d input was transposed at every call (196 x 2304 x 256: 2.6 ms
    against 2.0, AMD EPYC Zen 3). The batch stays the first dim, so a
    symbolic one is named where it was.

    Arithmetic on the sizes, not an op on the fake tensor: a fake op marks
    the fake mode, which Dynamo's own thread shares with a build on a
    thread of ours, as inside a kernel, and that thread then read its fake
    tensors' devices as "meta" (a channels-last MobileNetV2's loss gradient
    fell back to PyTorch, now and then, for a copy "between devices")."""
    return [meta.shape[0], math.prod(int(s) for s in meta.shape[1:])]


def channels_last_value(taken: TensorValue, meta: torch.Tensor) -> TensorValue:
    """The input as N, *spatial, C, from the flat value the graph takes."""
    perm = to_last(meta.dim())
    return ops.reshape(taken, [taken.shape[0], *(int(meta.shape[p]) for p in perm[1:])])


def raw_updates(
    updates: Mapping[torch.fx.Node, OptimizerUpdate],
) -> dict[torch.fx.Node, OptimizerUpdate]:
    """The optimizer updates whose parameter, state and gradient are all
    graph inputs traced channels-last alike: their kernel reads and writes
    them as the graph takes them, in their memory order."""
    found = {}
    for at, update in updates.items():
        operands = (*update.written, update.grad)
        metas = [n.meta.get("val") for n in operands]
        if (
            all(
                n.op == "placeholder"
                and isinstance(m, torch.Tensor)
                and takes_channels_last(m)
                for n, m in zip(operands, metas, strict=True)
            )
            and len({_traced(m) for m in metas}) == 1
        ):
            found[at] = update
    return found


def _traced(meta: torch.Tensor) -> tuple:
    """Sizes and strides as traced, compared without a guard."""
    return tuple(size_hint(s) for s in (*meta.shape, *meta.stride()))
