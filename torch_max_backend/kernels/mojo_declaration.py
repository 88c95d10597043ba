"""What a ``mojo_op`` declares: its kernel, its arguments split into tensors and
kernel parameters, and its outputs as described by the decorated function.

Shared by the op's eager half (``mojo_eager``, on the runtime) and its
lowering half (``mojo_lowering``, inside max_backend graphs).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from max.graph import TensorValue

from .library import MojoLibrary, Parameter

_PARAMETER_TYPES = (bool, int, float, str)


def described_outputs(value: object, op: str) -> list[torch.Tensor]:
    """The output tensor(s) a description returned, as a list."""
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    if not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise TypeError(
            f"{op}: the decorated function must return the op's output tensor(s) "
            f"(e.g. torch.empty_like(x)), got {value!r}"
        )
    return items


class MojoOpDeclaration:
    """One ``mojo_op``: its name, kernel library and kernel, and its describer."""

    def __init__(
        self, name: str, library: MojoLibrary, kernel: str, describe: Callable
    ) -> None:
        self.name, self.library, self.kernel = name, library, kernel
        self.describe = describe
        self.signature = inspect.signature(describe)

    def split(
        self, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[inspect.BoundArguments, list[Any], dict[str, Parameter]]:
        """The arguments bound to the signature, the tensors among them in
        order, and the others as kernel parameters."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        tensors, parameters = [], {}
        for pname, value in bound.arguments.items():
            if isinstance(value, (torch.Tensor, TensorValue)):
                tensors.append(value)
            elif isinstance(value, _PARAMETER_TYPES):
                parameters[pname] = value
            else:
                raise TypeError(
                    f"{self.name}: argument {pname!r} is {type(value).__name__}; "
                    "a Mojo op takes tensors and bool/int/float/str parameters"
                )
        return bound, tensors, parameters
