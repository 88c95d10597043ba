"""ATen -> MAX lowering: the registry, shared helpers, and op families."""

import sys as _sys
import types as _types
from typing import Any as _Any


class _DecoratorPackage(_types.ModuleType):
    """``torch_max_backend.lowering`` names both this subpackage and the public
    ``lowering`` decorator; the package root imports lazily, so whichever is
    bound there, calling it registers a lowering."""

    def __call__(self, *args: _Any, **kwargs: _Any) -> _Any:
        from .registry import lowering

        return lowering(*args, **kwargs)


_sys.modules[__name__].__class__ = _DecoratorPackage
