"""torch-max-backend: run ``torch.compile`` models with Modular's MAX engine.

>>> compiled = torch.compile(model, backend=max_backend)   # or backend="max"
"""

from .settings import beartype_enabled as _beartype_enabled

if _beartype_enabled():
    # Type-check every function of the package at run time; must run before
    # the submodules are imported.
    from beartype import BeartypeConf
    from beartype.claw import beartype_this_package

    from .errors import InternalTypeError as _InternalTypeError

    beartype_this_package(conf=BeartypeConf(violation_type=_InternalTypeError))

from .backend import max_backend
from .errors import (
    LoweringError,
    MaxCompilerError,
    UnsupportedOpsError,
)
from .explain import ExplainReport, explain
from .fallback import FallbackWarning
from .lowering.registry import MAPPING_TORCH_ATEN_TO_MAX, lowering
from .runtime.devices import get_accelerators
from .runtime.stats import CompileStats, compile_stats, reset_compile_stats

__all__ = [
    "MAPPING_TORCH_ATEN_TO_MAX",
    "CompileStats",
    "ExplainReport",
    "FallbackWarning",
    "LoweringError",
    "MaxCompilerError",
    "UnsupportedOpsError",
    "compile_stats",
    "explain",
    "get_accelerators",
    "lowering",
    "max_backend",
    "reset_compile_stats",
]
