"""Channels-last twins: conv-net activations stay in MAX's NHWC layout between ops.

MAX's conv and pooling kernels take channels-last tensors; PyTorch's are
channels-first. Permuting in and out around every op costs more than the
convolution itself on CPU (64-channel 3x3 conv at 56x56, MAX 26.7: 0.93 ms
alone, 1.47 ms with the two permutes). So an op that computes in channels-last
returns the channels-first value torch expects as a permute of its result and
records that result as the value's *twin*. The next conv, pooling, batch norm
or pointwise op reads the twin instead of permuting back; when nothing reads
the channels-first value, MAX's compiler drops its permute as dead code.

Pointwise ops (tagged ``pointwise`` by torch) commute with any permutation
applied to all their operands alike, so the graph builder runs them on twins
generically (``run_channels_last``); broadcast operands of lower rank are
aligned to the full rank first, then permuted the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from max.graph import Graph, TensorValue, ops

from .kit import device_of, size_hint
from .shapes import static_size


def to_last(rank: int) -> list[int]:
    """The permutation from N, C, *spatial to N, *spatial, C."""
    return [0, *range(2, rank), 1]


def to_first(rank: int) -> list[int]:
    """The permutation from N, *spatial, C back to N, C, *spatial."""
    return [0, rank - 1, *range(1, rank - 1)]


def permute_dims(x: TensorValue, perm: list[int]) -> TensorValue:
    """``x`` permuted; a reshape when only dims of size 1 move (a [1, C, 1, 1]
    broadcast operand, a 1x1 feature map), since then no element does."""
    moved = [d for d in perm if static_size(x.shape[d]) != 1]
    if moved == sorted(moved):
        return ops.reshape(x, [x.shape[d] for d in perm])
    return ops.permute(x, perm)


def _dense(sizes: list[int], strides: list[int]) -> bool:
    """Whether ``strides`` are row-major ``sizes``' (a dim of size 1 may
    have any stride)."""
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def takes_channels_last(meta: torch.Tensor) -> bool:
    """Whether a graph takes this input as its channels-last view
    (builder/channels_last_inputs.py), and a training forward returns it so
    when it saves it for the backward (passes/eager_layouts.py): a 4-d or
    5-d CPU tensor traced channels-last and not contiguous, its sizes past
    the batch static.

    Read from the traced example (symbolic strides and batch by their
    hints, no guard added): the graph's input is defined as the tensor's
    channels-last permute whatever its layout at a call, which the call
    path makes as a view where it is dense and copies where not.
    (Dynamo makes strides symbolic once a frame meets a second layout.)"""
    if device_of(meta).type != "cpu" or meta.dim() not in (4, 5):
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


class ChannelsLastTwins:
    """The channels-last twin of each channels-first value built so far in one graph."""

    def __init__(self) -> None:
        # id(value) -> (value, twin); the value is held so that its id stays its own.
        self._twins: dict[int, tuple[TensorValue, TensorValue]] = {}
        # id(value) -> (value, source, perm): value = permute(source, perm)
        # for a source laid out otherwise (a convolution's product is C, N, H, W).
        self._sources: dict[int, tuple[TensorValue, TensorValue, list[int]]] = {}
        # (id(value), id(block)) -> (value, block, its channels-last permute)
        # for values with no twin; value and block held so their ids stay theirs.
        self._permuted_last: dict[tuple[int, int], tuple[Any, Any, TensorValue]] = {}

    def twin(self, x: Any) -> TensorValue | None:
        entry = self._twins.get(id(x)) if isinstance(x, TensorValue) else None
        return entry[1] if entry is not None else None

    def channels_last(self, x: TensorValue) -> TensorValue:
        """``x`` (N, C, *spatial) as N, *spatial, C: its twin, or a permute
        (built once: a gradient read by both of a convolution's backward
        products was permuted twice, MAX merging no repeats)."""
        twin = self.twin(x)
        if twin is not None:
            return twin
        # Per block: a permute built in a branch's block is not seen outside it.
        block = Graph.current._current_block
        entry = self._permuted_last.get((id(x), id(block)))
        if entry is None:
            y = permute_dims(x, to_last(x.rank))
            entry = self._permuted_last[(id(x), id(block))] = (x, block, y)
        return entry[2]

    def channels_first(self, y: TensorValue) -> TensorValue:
        """The N, C, *spatial value of ``y`` (N, *spatial, C), with ``y`` as its twin."""
        x = permute_dims(y, to_first(y.rank))
        self._twins[id(x)] = (x, y)
        return x

    def permuted(self, source: TensorValue, perm: list[int]) -> TensorValue:
        """``source`` permuted by ``perm``, remembered as that value's source."""
        x = permute_dims(source, perm)
        self._sources[id(x)] = (x, source, perm)
        return x

    def source(self, x: Any) -> tuple[TensorValue, list[int]] | None:
        """The value ``x`` is a permute of, and the permutation: its twin, or a
        source given to ``permuted``; None for a value built as it is laid out.
        A reduction reads the source: rows in their memory order."""
        twin = self.twin(x)
        if twin is not None:
            return twin, to_first(twin.rank)
        entry = self._sources.get(id(x)) if isinstance(x, TensorValue) else None
        return (entry[1], entry[2]) if entry is not None else None

    def run_channels_last(
        self,
        fn: Callable[..., Any],
        args: list[Any],
        kwargs: dict[str, Any],
        out_meta: object,
    ) -> Any:
        """Run a pointwise lowering on twins if that saves permutes, else as is.

        Worth it when an operand has a twin and the result has that operand's
        rank: the result then gets a twin too, and the op reads no permute.
        """
        operands = [*args, *kwargs.values()]
        ranks = {v.rank for v in operands if self.twin(v) is not None}
        if (
            len(ranks) != 1
            or not isinstance(out_meta, torch.Tensor)
            or out_meta.dim() not in ranks
            or any(
                isinstance(v, (list, tuple))
                and any(isinstance(e, TensorValue) for e in v)
                for v in operands
            )
        ):
            return fn(*args, **kwargs)
        (rank,) = ranks

        def align(v: Any) -> Any:
            if not isinstance(v, TensorValue) or v.rank == 0:
                return v
            if v.rank > rank:
                raise ValueError("a pointwise operand outranks its result")
            if v.rank < rank:
                # Broadcasting aligns trailing dims: pad with leading ones first.
                v = ops.reshape(v, [1] * (rank - v.rank) + list(v.shape))
            return self.channels_last(v)

        result = fn(
            *[align(a) for a in args], **{k: align(v) for k, v in kwargs.items()}
        )
        if not isinstance(result, TensorValue) or result.rank != rank:
            raise ValueError("a pointwise lowering changed its operands' rank")
        return self.channels_first(result)


def is_pointwise(target: object) -> bool:
    tags = getattr(target, "tags", ())
    return torch.Tag.pointwise in tags
