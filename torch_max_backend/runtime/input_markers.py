"""What the call path reads for a MAX input that is not an FX input's tensor
as it is: markers in a compiled graph's input plan (compiled_graph.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


class Seed:
    """Marks the MAX input that takes a fresh random seed at every call.

    The seed is drawn from torch's default generator, so ``torch.manual_seed``
    makes MAX's random ops reproducible.
    """

    def __repr__(self) -> str:
        return "<seed>"


SEED = Seed()


@dataclass(frozen=True, slots=True)
class IntCarrier:
    """Marks the MAX input that carries FX input ``index``, a symbolic int at
    least 0 (its graph is guarded on that), as the first dim of an empty
    tensor (lower/builder/int_inputs.py)."""

    index: int


@dataclass(frozen=True, slots=True)
class IntValue:
    """Marks the MAX input that carries FX input ``index``, a symbolic int the
    graph uses only as a number, as a rank-0 int64 tensor of its value."""

    index: int


@dataclass(frozen=True, slots=True)
class ChannelsLastView:
    """Marks the MAX input that takes FX input ``index``, laid out
    channels-last, as its dense N, *spatial, C view flattened past N: no
    copy (lower/builder/channels_last_inputs.py)."""

    index: int


# The permutation from N, C, *spatial to N, *spatial, C, by rank, and the
# memory format whose layout that permute makes dense.
TO_LAST = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}
LAST_FORMAT = {4: torch.channels_last, 5: torch.channels_last_3d}
