"""torch-max-backend: run ``torch.compile`` models with Modular's MAX engine.

>>> compiled = torch.compile(model, backend=max_backend)   # or backend="max"

Names are imported on first use, so that ``torch_max_backend.aot.runner``
(running exported packages) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import old_paths as _old_paths
from .settings import beartype_enabled as _beartype_enabled

if _beartype_enabled():
    # Type-check every function of the package at run time; must run before
    # the submodules are imported.
    from beartype import BeartypeConf
    from beartype.claw import beartype_this_package

    from .internal_error import InternalTypeError as _InternalTypeError

    # is_pep484_tower: an int is a valid ``float`` (and a float a valid
    # ``complex``), as type checkers read the hints this package is written
    # with; ATen hands lowerings ``ord=2`` where the schema says Scalar.
    beartype_this_package(
        conf=BeartypeConf(violation_type=_InternalTypeError, is_pep484_tower=True)
    )

# The old paths of modules that moved, deprecated (old_paths.py); appended
# to the import system's finders, it serves nothing that exists.
_old_paths.install()

# Public name -> the module defining it.
_EXPORTS = {
    "max_backend": ".backend",
    "LoweringError": ".errors",
    "MaxCompilerError": ".errors",
    "UnsupportedOpsError": ".errors",
    "ExplainReport": ".explain",
    "explain": ".explain",
    "FallbackWarning": ".pipeline.fallback",
    "MAPPING_TORCH_ATEN_TO_MAX": ".lower.registry",
    "lowering": ".lower.registry",
    "get_accelerators": ".runtime.devices",
    "CompileStats": ".runtime.stats",
    "compile_stats": ".runtime.stats",
    "reset_compile_stats": ".runtime.stats",
    "KernelBuildError": ".kernels.library",
    "MojoLibrary": ".kernels.library",
    "mojo_op": ".kernel_ops",
    "wait_compiled": ".pipeline.background",
    "save_artifacts": ".storage.bundle",
    "load_artifacts": ".storage.bundle",
    "export": ".aot.exporter",
    "load": ".aot.runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'torch_max_backend' has no attribute {name!r}")
    if module not in (".aot.runner", ".runtime.stats", ".storage.bundle"):
        # The registry is complete whichever name is asked for first, so a
        # user's entry is never met by a family registering the same op.
        importlib.import_module(".lower.families", __name__).register_families()
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
