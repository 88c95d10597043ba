"""``torch_max_backend.lowering.*``: the lowering subpackage's old import path.

The subpackage is ``torch_max_backend.lower`` now, so that the name
``torch_max_backend.lowering`` is the public decorator and nothing else. Code
importing the old module paths keeps working for now, with a
DeprecationWarning naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

OLD = "torch_max_backend.lowering"
NEW = "torch_max_backend.lower"


class _DeprecatedPackage(types.ModuleType):
    """The old package: its attributes are the new package's, and calling it
    registers a lowering, as ``torch_max_backend.lowering`` (the decorator) does."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module(NEW), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .lower.registry import lowering

        return lowering(*args, **kwargs)


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = NEW + spec.name.removeprefix(OLD)
        warnings.warn(
            f"{spec.name} is deprecated; import {new} instead",
            DeprecationWarning,
            stacklevel=2,
        )
        if spec.name == OLD:
            module = _DeprecatedPackage(OLD)
            module.__path__ = []  # a package: its submodules import through here
            return module
        return importlib.import_module(new)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == OLD or fullname.startswith(OLD + "."):
            return importlib.machinery.ModuleSpec(
                fullname, _AliasLoader(), is_package=fullname == OLD
            )
        return None


def install() -> None:
    """Serve the old paths; called once by the package's ``__init__``."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
