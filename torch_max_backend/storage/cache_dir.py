"""MAX's on-disk caches: where they are, how big, and clearing them.

MAX keeps compiled graphs under ``<root>/.max_cache`` and compiled kernels
under ``<root>/.mojo_cache`` and ``<root>/.mogg_cache``; torch-max-backend
keeps its compiled-graph artifacts under ``<root>/torch_max_backend``. The root is
``~/.cache/modular`` unless ``MODULAR_DERIVED_PATH`` moves it (then
``$MODULAR_DERIVED_PATH/cache``). A graph found there loads in about 2 s
instead of a full compile.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# Compiled graphs torch-max-backend saves as MAX artifacts (storage/artifacts.py).
ARTIFACTS = "torch_max_backend"

PARTS = {
    ARTIFACTS: "compiled graphs saved by torch-max-backend",
    ".max_cache": "compiled MAX graphs",
    ".mojo_cache": "compiled Mojo kernels",
    ".mogg_cache": "compiled graph kernels",
}


def max_version() -> str:
    """The installed MAX version: compiled artifacts are valid for it alone."""
    try:
        return version("max")
    except PackageNotFoundError:  # a source build of MAX
        return "unknown"


def cache_root() -> Path:
    """The directory holding MAX's caches, following MAX's own settings."""
    derived = os.environ.get("MODULAR_DERIVED_PATH")
    if derived:
        return Path(derived) / "cache"
    return Path.home() / ".cache" / "modular"


def own_cache_dir() -> Path:
    """torch-max-backend's files for the installed MAX: artifacts are valid
    for one MAX version only, so each version has its own directory."""
    return cache_root() / ARTIFACTS / max_version()


def kernel_build_dir(digest: str) -> Path:
    """Where the kernel library whose sources and compiler hash to ``digest`` is built."""
    return own_cache_dir() / "kernels" / digest


@dataclass(frozen=True)
class CachePart:
    path: Path
    what: str
    files: int
    bytes: int


def _usage(path: Path) -> tuple[int, int]:
    files = size = 0
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                size += os.lstat(os.path.join(dirpath, name)).st_size
                files += 1
            except OSError:
                continue  # removed by a concurrent compile while walking
    return files, size


def cache_parts(root: Path | None = None) -> list[CachePart]:
    root = root or cache_root()
    return [
        CachePart(root / name, what, *_usage(root / name))
        for name, what in PARTS.items()
    ]


def clear_cache(root: Path | None = None) -> int:
    """Remove every MAX cache under ``root``; returns the bytes freed."""
    freed = 0
    for part in cache_parts(root):
        if part.path.exists():
            shutil.rmtree(part.path)
            freed += part.bytes
    return freed
