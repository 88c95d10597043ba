"""Which ATen operators MAX can run: the Core ATen opset against our registry.

The Core ATen opset is the set of overloads tagged ``core`` in the
``native_functions.yaml`` that ships inside the installed ``torchgen``; every
other ATen op decomposes into it. ``coverage()`` says, for each core overload,
whether it is lowered (with the capability limits of its lowering),
decomposed, or a known gap, and ``KNOWN_GAPS`` says why for the gaps.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch
import torchgen
import yaml
from torch._ops import OpOverload

from .registry import (
    MAPPING_TORCH_ATEN_TO_MAX,
    SUPPORTS,
    decomposition_table,
    strategies_of,
)

# Core overloads without a lowering, each a real limitation, stated plainly.
KNOWN_GAPS: dict[str, str] = {
    "aten._fft_r2c.default": (
        "returns a complex tensor; MAX has no complex dtype to carry it"
    ),
    "aten._fft_c2r.default": (
        "takes a complex tensor; MAX has no complex dtype to carry it"
    ),
    "aten._local_scalar_dense.default": (
        "Tensor.item() inside a graph yields a data-dependent host scalar that "
        "MAX graphs cannot return mid-graph; Dynamo breaks the graph there by "
        "default, and the op then runs in PyTorch"
    ),
}


def _yaml_path() -> Path:
    return (
        Path(torchgen.__file__).parent
        / "packaged"
        / "ATen"
        / "native"
        / "native_functions.yaml"
    )


@functools.cache
def core_overloads() -> tuple[OpOverload, ...]:
    """Every overload tagged ``core`` in the installed torchgen, in yaml order."""
    found: list[OpOverload] = []
    with _yaml_path().open() as f:
        entries = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    for entry in entries:
        tags = entry.get("tags") or []
        if isinstance(tags, str):
            tags = [tags]
        if "core" not in tags:
            continue
        name = entry["func"].split("(", 1)[0]
        base, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, base)
        found.append(getattr(packet, overload or "default"))
    return tuple(found)


@dataclass(frozen=True)
class OpStatus:
    op: OpOverload
    status: str  # "lowered", "decomposed" or "gap"
    note: str


def coverage() -> list[OpStatus]:
    """The status of every core overload, read from the live registry."""
    decomposed = decomposition_table()
    rows = []
    for op in core_overloads():
        name = str(op)
        if op in MAPPING_TORCH_ATEN_TO_MAX:
            fn = MAPPING_TORCH_ATEN_TO_MAX[op]
            family = fn.__module__.rsplit(".", 1)[-1]
            notes = [family, capability_note(fn), strategy_note(fn)]
            rows.append(OpStatus(op, "lowered", "; ".join(n for n in notes if n)))
        elif op in decomposed:
            rows.append(OpStatus(op, "decomposed", "by PyTorch's decompositions"))
        else:
            rows.append(OpStatus(op, "gap", KNOWN_GAPS.get(name, "no lowering yet")))
    return sorted(rows, key=lambda r: str(r.op))


def capability_note(fn: object) -> str:
    """What a partial lowering covers: its capability check's summary paragraph."""
    check = getattr(fn, SUPPORTS, None)
    if check is None or getattr(check, "covers_all", False):
        return ""
    doc = (check.__doc__ or "").strip().split("\n\n")[0]
    text = " ".join(doc.split()) or check.__name__.strip("_").replace("_", " ")
    return "covers: " + text[:1].lower() + text[1:].rstrip(".")


def strategy_note(fn: object) -> str:
    """For an op with ranked strategies: each, in the order they are tried,
    with what it takes (its check's first line)."""
    parts = []
    for strategy in strategies_of(fn):
        doc = (strategy.supports.__doc__ or "") if strategy.supports else ""
        text = " ".join(doc.strip().split("\n\n")[0].split()).rstrip(".")
        parts.append(f"{strategy.name} ({text[:1].lower() + text[1:] or 'the rest'})")
    return "strategies, first fit: " + ", ".join(parts) if parts else ""
