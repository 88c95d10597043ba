"""``mojo_op``: a user's Mojo kernel as a PyTorch op, eager and compiled.

The decorated function declares the op: its annotations give the schema
(tensors, and int/float/bool/str arguments, which become the kernel's
compile-time parameters of the same names), and its body describes the
outputs from the inputs, e.g. ``return torch.empty_like(x)``. It runs only on
fake tensors, never on data. The result is a ``torch.library`` custom op:

- eagerly, on CPU (or CUDA) tensors, it runs the kernel through MAX: a
  one-op graph compiled once per input shapes, dtypes and parameters;
- under Dynamo its description is the fake implementation, so the op is
  traced into the graph instead of breaking it;
- under max_backend it lowers to a MAX custom op inside the compiled graph;
- ``op.register_autograd(backward, setup_context=...)`` gives it a backward,
  written in PyTorch or with other Mojo ops.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .kernels.library import MojoLibrary, sources_digest
from .kernels.mojo_declaration import MojoOpDeclaration
from .lower.mojo_lowering import MojoOpLowering
from .lower.registry import MAPPING_TORCH_ATEN_TO_MAX
from .runtime.mojo_eager import EagerMojoOp

_LIBRARIES: dict[Path, MojoLibrary] = {}


def _library(source: Path) -> MojoLibrary:
    """One library per source: ops whose kernels share a file share its build
    (a graph must not load two libraries registering the same kernels). The
    name's tag comes from the source's content, not its path, so the same
    kernels in another checkout reuse the build and the graphs naming it."""
    source = source.resolve()
    if source not in _LIBRARIES:
        tag = sources_digest(source)[:8]
        stem = re.sub(r"\W", "_", source.stem) or "kernels"
        _LIBRARIES[source] = MojoLibrary(f"mojo_{stem}_{tag}", source)
    return _LIBRARIES[source]


def mojo_op(
    name: str,
    kernel: str | Path,
    *,
    kernel_name: str | None = None,
) -> Callable[[Callable[..., Any]], torch.library.CustomOpDef]:
    """Register a Mojo kernel as the PyTorch op ``name`` ("namespace::op").

    Args:
        name: the op's qualified name; it is then ``torch.ops.namespace.op``.
        kernel: a ``.mojo`` file, or a Mojo package directory (with an
            ``__init__.mojo``), registering the kernel with
            ``@extensibility.register("<kernel_name>")``.
        kernel_name: the name the kernel registers under; defaults to the
            op's name after "::".

    The decorated function gives the op's schema by its annotations and its
    outputs' shapes and dtypes by its body (it runs on fake tensors only).
    The library is built when the op is first run or compiled; a Mojo error
    then raises ``KernelBuildError`` with the compiler's message.
    """
    if "::" not in name:
        raise ValueError(f"a Mojo op's name is 'namespace::op', got {name!r}")
    short = name.split("::", 1)[1]
    source = Path(kernel)
    if not source.exists():
        raise FileNotFoundError(f"Mojo kernel source {source} does not exist")
    library = _library(source)

    def register(describe: Callable[..., Any]) -> torch.library.CustomOpDef:
        declaration = MojoOpDeclaration(name, library, kernel_name or short, describe)
        op = torch.library.custom_op(name, mutates_args=())(describe)
        op.register_fake(describe)
        eager = EagerMojoOp(declaration)
        for device_type in ("cpu", "cuda"):
            op.register_kernel(device_type, eager)
        overload = getattr(getattr(torch.ops, name.split("::")[0]), short).default
        MAPPING_TORCH_ATEN_TO_MAX[overload] = MojoOpLowering(declaration)
        op._mojo = declaration  # for introspection and tests
        return op

    return register
