"""The error raised when a runtime type check inside the package fails.

Kept free of torch imports: the package root installs the checks before any
submodule is imported, and the AOT runner must not import torch at all.
"""

from __future__ import annotations


class InternalTypeError(TypeError):
    """A runtime type check inside torch-max-backend failed: a bug of ours."""

    def __init__(self, message: str = "") -> None:
        super().__init__(
            "internal error in torch-max-backend (a bug: please report it; "
            "TORCH_MAX_BACKEND_BEARTYPE=0 switches these checks off): " + message
        )
