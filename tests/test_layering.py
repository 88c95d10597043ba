"""The one rule of dependence (docs/architecture.md), kept by reading imports.

Every module of the package belongs to a room; a room may import only the
rooms listed for it. The check reads every import statement with ``ast``,
module-level or inside a function, so a lazy import is no way around it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "torch_max_backend"

# Module (dotted, below torch_max_backend) or package prefix -> room; the
# longest matching prefix decides.
ROOMS: dict[str, str] = {
    "settings": "base",
    "errors": "base",
    "internal_error": "base",
    "logs": "base",
    "dtypes": "base",
    "plan": "plan",
    "storage": "storage",
    "kernels": "kernel_build",
    "kernels.library": "kernel_build",
    "kernels.mojo_declaration": "kernel_build",
    "lower": "lower",
    "kernels.mojo_lowering": "kernel_lowering",
    "runtime": "runtime",
    "kernels.mojo_eager": "kernel_runtime",
    "kernels.mojo_op": "kernel_op",
    "handoff": "placement",
    "fallback": "placement",
    "explain": "explain",
    "aot": "export",
    "aot.manifest": "export_format",
    "aot.runner": "export_runner",
    "aot.exporter": "export",
    "backend": "backend",
    "background": "backend",
    "warm_start": "backend",
    "product_upgrade": "backend",
    "deferred": "backend",
    "graph_builds": "backend",
    "cli": "cli",
    "cli_aot": "cli",
    "": "api",  # the package's __init__: public names, imported lazily
    "lowering_alias": "api",
}

_BELOW_LOWER = {"base", "plan", "storage", "kernel_build"}
ALLOWED: dict[str, set[str]] = {
    "base": {"base"},
    "plan": {"plan"},
    "storage": {"base", "storage"},
    "kernel_build": {"base", "storage", "kernel_build"},
    "lower": _BELOW_LOWER | {"lower"},
    "runtime": {"base", "plan", "storage", "runtime"},
    "kernel_lowering": _BELOW_LOWER | {"lower"},
    "kernel_runtime": {"base", "plan", "storage", "kernel_build", "runtime"},
    "kernel_op": _BELOW_LOWER | {"lower", "kernel_lowering", "kernel_runtime"},
    "placement": {"base", "plan", "lower", "placement"},
    "explain": {"base", "plan", "lower", "placement"},
    "export_format": set(),
    "export_runner": {"base", "storage", "export_format"},
    "export": _BELOW_LOWER | {"lower", "export_format", "export"},
    "backend": _BELOW_LOWER | {"lower", "runtime", "placement"},
    "cli": set(ROOMS.values()),
    "api": {"base", "lower"},
}

# Rooms that must not import these third-party packages at all.
FORBIDDEN_LIBRARIES: dict[str, set[str]] = {
    "plan": {"torch", "max", "sympy"},
    "export_format": {"torch", "max"},
    "export_runner": {"torch"},
    "base": {"max.engine"},
}

# Outside ``lower``, the graph build is used through ``lower.builder`` only
# (the capability check's public face), never its inner modules.
PUBLIC_FACES = {"lower.builder": "lower"}


def room_of(module: str) -> str:
    best = ""
    for prefix in ROOMS:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(
            best
        ):
            best = prefix
    return ROOMS[best]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[str, str]]:
    """(imported module relative to the package or third-party name, name) pairs."""
    found: list[tuple[str, str]] = []
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                target = f"torch_max_backend.{target}".rstrip(".")
            else:
                target = node.module or ""
            for alias in node.names:
                found.append((target, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.append((alias.name, ""))
    return found


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Every import of ``source`` (the module ``module``) that breaks the rule."""
    room = room_of(module)
    wrong: list[str] = []
    for target, name in imports_of(source, module, is_package):
        if target == "torch_max_backend" or target.startswith("torch_max_backend."):
            inner = target.removeprefix("torch_max_backend").lstrip(".")
            if not inner and name:  # ``from .. import plan``
                inner = name
            elif name and f"{inner}.{name}".lstrip(".") in _all_modules():
                inner = f"{inner}.{name}".lstrip(".")
            other = room_of(inner)
            if other not in ALLOWED[room] and other != room:
                wrong.append(f"{module} ({room}) imports {inner} ({other})")
            for face, face_room in PUBLIC_FACES.items():
                if inner.startswith(face + ".") and room != face_room:
                    wrong.append(f"{module} imports {inner}, not its face {face}")
            if name.startswith("_") and room_of(inner) != room:
                wrong.append(f"{module} imports the private {inner}.{name}")
        else:
            for library in FORBIDDEN_LIBRARIES.get(room, ()):
                if target == library or target.startswith(library + "."):
                    wrong.append(f"{module} ({room}) imports {target}")
    return wrong


_MODULES: set[str] = set()


def _all_modules() -> set[str]:
    if not _MODULES:
        _MODULES.update(_module_name(p) for p in PACKAGE.rglob("*.py"))
    return _MODULES


def test_every_module_has_a_room():
    for name in _all_modules():
        assert room_of(name) in ALLOWED, name


def test_dependence_runs_one_way():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        wrong += violations(
            path.read_text(), _module_name(path), is_package=path.name == "__init__.py"
        )
    assert not wrong, "\n".join(wrong)


# The wrong-way imports the package once had: each must be caught.
@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("runtime.compiled_graph", "from ..lower.builder import BuiltGraph"),
        ("runtime.session", "from ..lower.registry import MAPPING_TORCH_ATEN_TO_MAX"),
        ("fallback", "from .lower.builder.capability import why_unsupported"),
        ("explain", "from .lower.builder.walk import NodeWalk"),
        ("explain", "from .runtime.session import compile_graph"),
        ("kernels.library", "from ..runtime.session import compile_graph"),
        ("kernels.mojo_lowering", "from ..runtime.compiled_graph import as_buffer"),
        ("kernels.mojo_eager", "from ..lower.context import current"),
        ("kernels.mojo_op", "from ..runtime.compiled_graph import _as_buffer"),
        ("aot.runner", "from ..runtime.session import compile_graph"),
        ("aot.runner", "import torch"),
        ("aot.exporter", "from ..runtime.session import compile_graph"),
        ("lower.ops.convolution", "from ...runtime.devices import max_device"),
        ("lower.builder.walk", "from ...backend import max_backend"),
        ("plan.graph_plan", "import torch"),
        ("plan.graph_plan", "from ..lower.builder import BuiltGraph"),
        ("storage.cache_dir", "from ..runtime.session import MODELS"),
        ("lower.ops.pooling", "def f():\n    from ...runtime import session\n"),
    ],
)
def test_the_check_catches_wrong_way_imports(module, source):
    assert violations(source, module)
