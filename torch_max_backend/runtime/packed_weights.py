"""The packed copies of a frozen-weights graph's weights, made by the call path.

A PACKED input (plan/graph_plan.py) is FX input ``index``, a weight, packed
by the vendor BLAS (kernels/weight_packing.py). The copy is made at the first
call and kept; it is made again when the call hands another tensor, or the
same one moved (its data pointer) or changed by a torch op (its version
counter, which in-place ops on it and on its views bump). A write that
bypasses the counter (through ``.data``, numpy, DLPack) is not seen: the
promise ``frozen_weights`` asks of its user.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from .. import logs

_log = logs.get_logger("runtime")
# Packs a weight as a PACKED input's sizes say (kernels/weight_packing.py's
# ``pack_listed``): handed in by the compile pipeline, since the runtime does
# not build on the kernels' room.
Packer = Callable[[torch.Tensor, tuple[int, ...]], torch.Tensor]
_packer: Packer | None = None


def use_packer(packer: Packer) -> None:
    """Process-wide: how PACKED inputs are packed from now on."""
    global _packer
    _packer = packer


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter, None where it has none (an inference
    tensor): such a weight is packed at every call."""
    try:
        return tensor._version
    except RuntimeError:
        return None


class PackedWeight:
    """The MAX buffer of FX input ``index`` packed as ``packing`` (a PACKED
    input's sizes) says, kept while that input stays the tensor it was
    packed from, unchanged."""

    __slots__ = ("_kept", "_wrap", "index", "packing")

    def __init__(
        self, index: int, packing: tuple[int, ...], wrap: Callable[[torch.Tensor], Any]
    ) -> None:
        self.index = index
        self.packing = packing
        self._wrap = wrap
        # (weakref to the weight, its data pointer, its version, the packed
        # copy, its MAX buffer) of the latest packing, or None.
        self._kept: tuple[Any, int, int | None, torch.Tensor, Any] | None = None

    def buffer(self, weight: torch.Tensor) -> Any:
        """The packed ``weight``'s buffer, packed again only if it changed."""
        kept = self._kept
        version = _version(weight)
        if (
            kept is not None
            and kept[0]() is weight
            and kept[1] == weight.data_ptr()
            and version is not None
            and kept[2] == version
        ):
            return kept[4]
        if _packer is None:
            raise RuntimeError("torch-max-backend: no weight packer was set")
        _log.debug("torch-max-backend: packing input %d %s", self.index, self.packing)
        packed = _packer(weight, self.packing)
        buffer = self._wrap(packed)
        self._kept = (weakref.ref(weight), weight.data_ptr(), version, packed, buffer)
        return buffer
