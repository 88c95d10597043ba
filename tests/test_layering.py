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
    "env_vars": "base",
    "errors": "base",
    "internal_error": "base",
    "logs": "base",
    "dtypes": "base",
    "native_threads": "base",
    "plan": "plan",
    "storage": "storage",
    "kernels": "kernel_build",
    "kernels.library": "kernel_build",
    "kernels.mojo_declaration": "kernel_build",
    "lower": "lower",
    "lower.passes": "passes",
    "lower.builder": "builder",
    "runtime": "runtime",
    "runtime.mojo_eager": "kernel_runtime",
    # MAX's polling thread idled: the compile pipeline and the export runner
    # (no torch) both use it, so it imports nothing but the base.
    "runtime.max_poller": "cpu_threads",
    "kernel_ops": "kernel_op",
    "pipeline": "pipeline",
    "pipeline.handoff": "placement",
    "pipeline.fallback": "placement",
    "explain": "explain",
    "aot": "export",
    "aot.manifest": "export_format",
    "aot.runner": "export_runner",
    "aot.exporter": "export",
    "backend": "backend",
    "cli": "cli",
    "cli_aot": "cli",
    "": "api",  # the package's __init__: public names, imported lazily
    "old_paths": "api",
}

_BELOW_LOWER = {"base", "plan", "storage", "kernel_build"}
# lower/ holds three rooms, each using those before it: the lowerings and
# their kit; the FX passes (which use the kit); the builder (planning, the
# node walk, the output plan), which reads the passes' findings. Nothing
# below the builder calls back into it, nor the lowerings into a pass.
_LOWER = _BELOW_LOWER | {"lower", "passes", "builder"}
ALLOWED: dict[str, set[str]] = {
    "base": {"base"},
    "plan": {"plan"},
    "storage": {"base", "storage"},
    "kernel_build": {"base", "storage", "kernel_build"},
    "lower": _BELOW_LOWER | {"lower"},
    "passes": _BELOW_LOWER | {"lower", "passes"},
    "builder": _LOWER,
    "runtime": {"base", "plan", "storage", "runtime"},
    "cpu_threads": {"base"},
    "kernel_runtime": {"base", "plan", "storage", "kernel_build", "runtime"},
    "kernel_op": _LOWER | {"kernel_runtime"},
    "placement": {"base", "plan", "builder", "placement"},
    "explain": {"base", "plan", "lower", "builder", "placement"},
    "export_format": set(),
    "export_runner": {"base", "storage", "export_format", "cpu_threads"},
    "export": _LOWER | {"export_format", "export"},
    "pipeline": _LOWER | {"runtime", "cpu_threads", "placement", "pipeline"},
    "backend": _LOWER | {"runtime", "cpu_threads", "placement", "pipeline"},
    "cli": set(ROOMS.values()),
    "api": {"base", "lower"},
}

# Rooms that must not import these third-party packages at all.
FORBIDDEN_LIBRARIES: dict[str, set[str]] = {
    "plan": {"torch", "max", "sympy"},
    "export_format": {"torch", "max"},
    "export_runner": {"torch"},
    "cpu_threads": {"torch", "max"},
    "base": {"max.engine"},
}

# Outside its room, the graph build is used through ``lower.builder`` only
# (the capability check's public face), never its inner modules; and the
# passes through ``lower.passes``.
PUBLIC_FACES = {"lower.builder": "builder", "lower.passes": "passes"}


# The compile pipeline's stages in the order a graph meets them: a stage
# imports only the stages before it (backend.py strings them together).
STAGES = (
    "traced_backward",
    "handoff",
    "fallback",
    "graph_builds",
    "warm_start",
    "product_upgrade",
    "compiling",
    "background",
    "update_graphs",
    "deferred",
)


def _stage(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "pipeline" and parts[1] in STAGES:
        return STAGES.index(parts[1])
    return None


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
            stage, used = _stage(module), _stage(inner)
            if stage is not None and used is not None and used > stage:
                wrong.append(f"stage {module} imports the later stage {inner}")
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
        ("pipeline.fallback", "from ..lower.builder.capability import why_unsupported"),
        ("explain", "from .lower.builder.walk import NodeWalk"),
        ("explain", "from .runtime.session import compile_graph"),
        ("kernels.library", "from ..runtime.session import compile_graph"),
        ("lower.mojo_lowering", "from ..runtime.compiled_graph import as_buffer"),
        ("runtime.mojo_eager", "from ..lower.context import current"),
        ("kernel_ops", "from .runtime.compiled_graph import _as_buffer"),
        ("kernels.library", "from ..lower.registry import lowering"),
        ("kernels.product_timing", "from ..lower.context import current"),
        ("lower.passes.folding", "from ..builder.planning import InputPlan"),
        ("lower.ops.attention", "from ..passes import analyzed"),
        ("lower.builder.walk", "from ..passes.slot_writes import find_slot_writes"),
        ("pipeline.graph_builds", "from .background import Finish"),
        ("pipeline.warm_start", "from .compiling import start_max"),
        ("pipeline.handoff", "from ..backend import max_backend"),
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


def test_every_pipeline_module_is_a_stage():
    modules = {p.stem for p in (PACKAGE / "pipeline").glob("*.py")} - {"__init__"}
    assert modules == set(STAGES)
