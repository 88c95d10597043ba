"""Old import paths of modules that moved, served with a DeprecationWarning.

``torch_max_backend.lowering.*``: the lowering subpackage is
``torch_max_backend.lower`` now, so that the name
``torch_max_backend.lowering`` is the public decorator and nothing else.
The compile pipeline's stages moved into ``pipeline/``, the FX passes into
``lower/passes/``, and a user's Mojo op's halves out of ``kernels/`` (a
warnings filter naming ``torch_max_backend.fallback.FallbackWarning`` keeps
working, for one). Code importing an old path keeps working for now, with a
DeprecationWarning naming the new one.
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

_PACKAGE = "torch_max_backend."
# Old module (below the package) -> where it lives now.
MOVED = {
    **{
        stage: f"pipeline.{stage}"
        for stage in (
            "fallback",
            "handoff",
            "graph_builds",
            "warm_start",
            "background",
            "deferred",
            "product_upgrade",
        )
    },
    **{
        f"lower.builder.{name}": f"lower.passes.{name}"
        for name in (
            "repeats",
            "folding",
            "slot_writes",
            "repeated_kv",
            "eager_layouts",
        )
    },
    "kernels.mojo_op": "kernel_ops",
    "kernels.mojo_lowering": "lower.mojo_lowering",
    "kernels.mojo_eager": "runtime.mojo_eager",
    "lowering_alias": "old_paths",
}


def _new_name(old: str) -> str | None:
    """Where the module ``old`` lives now, or None if it did not move."""
    if old == OLD or old.startswith(OLD + "."):
        return NEW + old.removeprefix(OLD)
    moved = MOVED.get(old.removeprefix(_PACKAGE)) if old.startswith(_PACKAGE) else None
    return None if moved is None else _PACKAGE + moved


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
        new = _new_name(spec.name)
        assert new is not None  # the finder asked
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
        if _new_name(fullname) is not None:
            return importlib.machinery.ModuleSpec(
                fullname, _AliasLoader(), is_package=fullname == OLD
            )
        return None


def install() -> None:
    """Serve the old paths; called once by the package's ``__init__``."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
