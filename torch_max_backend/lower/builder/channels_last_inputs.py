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

CPU graphs only (the GPU path keeps the copy, untimed there), and not for an
input the graph writes: MAX writes a buffer's memory as it is laid out.
"""

from __future__ import annotations

import torch
from max.graph import TensorValue, ops

from ..kit import size_hint
from ..layout import to_last


def _dense(sizes: list[int], strides: list[int]) -> bool:
    """Whether ``strides`` are row-major ``sizes``' (a dim of size 1 may
    have any stride)."""
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def takes_channels_last(meta: torch.Tensor, device: torch.device) -> bool:
    """Whether the graph takes this input as its channels-last view: a 4-d
    or 5-d CPU tensor traced channels-last and not contiguous, its sizes
    past the batch static.

    Read from the traced example (symbolic strides and batch by their
    hints, no guard added): the graph's input is defined as the tensor's
    channels-last permute whatever its layout at a call, which the call
    path makes as a view where it is dense and copies where not.
    (Dynamo makes strides symbolic once a frame meets a second layout.)"""
    if device.type != "cpu" or meta.dim() not in (4, 5):
        return False
    if not all(isinstance(s, int) for s in meta.shape[1:]):
        return False
    sizes = [size_hint(s) for s in meta.shape]
    strides = [size_hint(s) for s in meta.stride()]
    if None in sizes or None in strides:
        return False
    perm = to_last(meta.dim())
    last = _dense([sizes[p] for p in perm], [strides[p] for p in perm])
    return last and not _dense(sizes, strides)


def as_taken(meta: torch.Tensor) -> torch.Tensor:
    """The input's meta as the graph takes it: N, *spatial, C flattened past
    N. Flat, because MAX folds a transposed operand into its matmul only
    where the transpose reads a graph input, or a reshape that gives one
    back: a channels-last filter read as [O, kh * kw * C] through a reshape
    of a 4-d input was transposed at every call (196 x 2304 x 256: 2.6 ms
    against 2.0, AMD EPYC Zen 3). The batch stays the first dim, so a
    symbolic one is named where it was."""
    return meta.permute(to_last(meta.dim())).flatten(1)


def channels_last_value(taken: TensorValue, meta: torch.Tensor) -> TensorValue:
    """The input as N, *spatial, C, from the flat value the graph takes."""
    perm = to_last(meta.dim())
    return ops.reshape(taken, [taken.shape[0], *(int(meta.shape[p]) for p in perm[1:])])
