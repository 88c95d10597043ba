"""What machine a benchmark ran on: CPU vendor, model and last-level cache,
cores, memory, accelerator, versions, and the vendor BLAS products may call.

Every figure is named with its machine: MAX's CPU kernels beat PyTorch's on
an AMD EPYC and lose to oneDNN/MKL on an Intel Xeon, so a ratio means
nothing without the CPU beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}


def _cpuinfo() -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            found.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return found


def _last_level_cache() -> str:
    """The largest cache of CPU 0, as the kernel reports it ("L3 32768K")."""
    from torch_max_backend.storage.product_choices import last_level_cache

    found = last_level_cache()
    return "unknown" if found is None else f"L{found[0]} {found[1] // 1024}K"


def _family_model(info: dict[str, str]) -> str | None:
    """ "family 6 model 106": under a hypervisor the model name can be a
    generic "Intel(R) Xeon(R) Processor" for every generation."""
    family, model = info.get("cpu family"), info.get("model")
    return f"family {family} model {model}" if family and model else None


def _vector_units(info: dict[str, str]) -> str | None:
    """The widest vector and matrix units the CPU offers, which decide whose
    kernels win: "AVX-512 and AMX", "AVX-512", "AVX2"."""
    flags = set(info.get("flags", "").split())
    widest = next(
        (
            name
            for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"))
            if flag in flags
        ),
        None,
    )
    if widest and "amx_tile" in flags:
        return f"{widest} and AMX"
    return widest


def _readable(size: str) -> str:
    """ "L3 32768K" as "L3 32 MiB"."""
    level, _, amount = size.partition(" ")
    if amount.endswith("K") and amount[:-1].isdigit():
        kib = int(amount[:-1])
        return f"{level} {kib // 1024} MiB" if kib >= 1024 else f"{level} {kib} KiB"
    return size


def machine() -> dict[str, Any]:
    """This machine's CPU, memory, GPU (name and memory, when PyTorch sees
    one) and versions."""
    import max as max_package
    import torch

    from torch_max_backend.kernels.vendor_blas import describe

    info = _cpuinfo()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    found = {
        "cpu": info.get("model name", platform.processor()),
        "cpu_vendor": _VENDORS.get(info.get("vendor_id", ""), info.get("vendor_id")),
        "cpu_family_model": _family_model(info),
        "cpu_vector_units": _vector_units(info),
        "last_level_cache": _readable(_last_level_cache()),
        "cores": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "vendor_blas": describe(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "max": getattr(max_package, "__version__", "26.7.0"),
    }
    if found["gpu"] is not None:  # kept out of a CPU-only machine's figures
        total = torch.cuda.get_device_properties(0).total_memory
        found["gpu_memory_gib"] = round(total / 2**30, 1)
    return found


def cpu_line(m: dict[str, Any]) -> str:
    """``AMD EPYC (AMD, family 26 model 2, AVX-512, L3 32 MiB), 2 cores,
    23.4 GiB``; figures saved before the family and units were recorded lack
    them."""
    about = [
        m.get("cpu_vendor") or "?",
        m.get("cpu_family_model"),
        m.get("cpu_vector_units"),
        m.get("last_level_cache") or "?",
    ]
    described = ", ".join(part for part in about if part)
    return f"{m['cpu']} ({described}), {m['cores']} cores, {m['memory_gib']} GiB"


@contextlib.contextmanager
def product_timings_carried(directory: Path | None) -> Iterator[None]:
    """A fresh compile cache in ``directory`` that still holds this
    machine's product timings (lower/product_choice.py): they are a fact of
    the machine, taken once, not a compile cache; what a child times anew
    is merged back, so that a later child of the run does not time it again.
    ``None`` (the user's caches): nothing to carry."""
    if directory is None:
        yield
        return
    from torch_max_backend.storage.cache_dir import own_cache_dir
    from torch_max_backend.storage.product_choices import DIRECTORY

    own = own_cache_dir() / DIRECTORY
    relative = own.relative_to(own.parents[2])  # torch_max_backend/<max>/...
    carried = directory / "cache" / relative
    if own.is_dir():
        shutil.copytree(own, carried, dirs_exist_ok=True)
    try:
        yield
    finally:
        if carried.is_dir():
            own.mkdir(parents=True, exist_ok=True)
            for table in carried.glob("*.json"):
                _merge(table, own / table.name)


def _merge(source: Path, target: Path) -> None:
    """The choices of ``source`` added to ``target``'s (the same machine's)."""
    try:
        new = json.loads(source.read_text())
        old = json.loads(target.read_text()) if target.is_file() else dict(new)
        old["choices"] = {**old.get("choices", {}), **new.get("choices", {})}
        target.write_text(json.dumps(old, indent=0, sort_keys=True))
    except (OSError, ValueError):
        pass  # a table that cannot be merged is timed again next time
