"""Which way of computing a matrix product (or a convolution) was fastest on
this machine, by shape.

The lowering times the candidate forms of a product once per machine and
shape (lower/product_choice.py), and those of a convolution
(lower/conv_choice.py, keys starting "conv "); the answers live here, in one
small JSON table per machine under the storage cache, so that a second process reads
them instead of timing again. The machine is named by what decides the
timings: the CPU target MAX compiles for (model and feature flags), the
usable cores and the vendor library found. Another machine reads another
table and times afresh.

Writes are atomic (a temporary file renamed into place) and read-merge-write:
two processes timing at once lose at most one another's new entries, which
the next process times again. An unreadable table is removed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from .. import logs
from .bundle import cpu_target
from .cache_dir import own_cache_dir

# 2: timed once MAX's polling thread is idled, as the graphs run
# (kernels/product_timing.py); version 1's times had it preempting the forms'
# tasks, and its choices are timed again.
FORMAT_VERSION = 2
DIRECTORY = "product_choices"
_log = logs.get_logger("cache")
_lock = threading.Lock()


@functools.cache
def machine_identity(vendor_library: str) -> str:
    """What names this machine for product timings: the CPU, its usable cores
    and the vendor library (name and version, or "none")."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    return f"{cpu_target()}; {cores or os.cpu_count()} cores; {vendor_library}"


@functools.cache
def last_level_cache() -> tuple[int, int] | None:
    """The level of the CPU's last data cache and its bytes (Linux's sysfs),
    None where unknown."""
    caches = Path("/sys/devices/system/cpu/cpu0/cache")
    best: tuple[int, int] | None = None
    for index in caches.glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if kind != "Instruction" and digits.isdigit():
            found = (level, int(digits) * scale)
            best = found if best is None or found > best else best
    return best


def last_level_cache_bytes() -> int | None:
    """The CPU's last-level cache in bytes, None where unknown."""
    found = last_level_cache()
    return found[1] if found else None


def table_path(identity: str) -> Path:
    """The table of the machine ``identity``."""
    digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
    return own_cache_dir() / DIRECTORY / f"{digest}.json"


def _read(path: Path, announce: bool = True) -> dict[str, Any]:
    """The choices saved in ``path``; a table of an older format reads as
    empty (said once, where ``announce``), an unreadable one is removed."""
    try:
        table = json.loads(path.read_text())
        if not isinstance(table, dict):
            raise ValueError("not a product-choice table")
        version = table.get("version")
        if isinstance(version, int) and 0 < version < FORMAT_VERSION:
            if not announce:
                return {}
            _log.info(
                "torch-max-backend: %s was timed under an older rule "
                "(version %d); its shapes are timed again",
                path,
                version,
            )
            return {}
        if version != FORMAT_VERSION:
            raise ValueError("not a product-choice table of this format")
        choices = table.get("choices")
        if not isinstance(choices, dict):
            raise ValueError("no choices")
        return choices
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        _log.warning("torch-max-backend: removing the unreadable %s: %s", path, e)
        path.unlink(missing_ok=True)
        return {}


class ProductChoices:
    """The timed choices of one machine, read once and kept in memory."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.path = table_path(identity)
        self._choices: dict[str, Any] | None = None

    def _loaded(self) -> dict[str, Any]:
        if self._choices is None:
            self._choices = _read(self.path)
        return self._choices

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry of ``key``: {"choice": name, "us": {name: microseconds}}."""
        with _lock:
            entry = self._loaded().get(key)
        return entry if isinstance(entry, dict) and "choice" in entry else None

    def put(self, key: str, choice: str, times_us: dict[str, float]) -> None:
        """Record ``choice`` for ``key`` with the times that chose it, on disk too."""
        entry = {"choice": choice, "us": {k: round(v, 2) for k, v in times_us.items()}}
        with _lock:
            self._loaded()[key] = entry
            # Reread for what other processes added; an older table was
            # announced when this one first read it.
            merged = {**_read(self.path, announce=False), key: entry}
            self._write(merged)

    def _write(self, choices: dict[str, Any]) -> None:
        data = json.dumps(
            {"version": FORMAT_VERSION, "machine": self.identity, "choices": choices},
            indent=0,
            sort_keys=True,
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(
                dir=self.path.parent, prefix=".", suffix=".partial"
            )
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(data)
                os.replace(tmp, self.path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError as e:
            _log.warning("torch-max-backend: could not save %s: %s", self.path, e)
