"""The package format: a directory holding ``graph.mef`` (the compiled MAX
graph), ``weights.safetensors`` and this ``manifest.json``.

The manifest lists, in MAX input order, every input of the compiled graph:
the caller's inputs (with symbolic dims by name) and the weights. Imports no
torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# 2: checks (inputs the graph refuses as eager does).
FORMAT_VERSION = 2
CHECK_ERRORS = ("IndexError", "RuntimeError")
MANIFEST = "manifest.json"
GRAPH = "graph.mef"
WEIGHTS = "weights.safetensors"


class PackageError(Exception):
    """A package cannot be used: missing, damaged, foreign or mismatched."""


@dataclass
class TensorSpec:
    name: str
    dtype: str  # numpy dtype name: "float32", "int64", ...
    # An int for a static dim, a symbol name ("batch") for a dynamic one.
    shape: list[int | str]

    def describe(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(str(d) for d in self.shape)}]"


@dataclass
class Manifest:
    max_version: str
    torch_version: str
    device: str  # "cpu" or "gpu"
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    weights: list[TensorSpec]
    # For each MAX graph input in order: "input:<i>" or "weight:<name>".
    order: list[str]
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    # [error, message] per input the graph refuses as eager PyTorch does: the
    # graph's last output holds one flag for each, and a set flag raises.
    checks: list[list[str]] = field(default_factory=list)

    def write(self, directory: Path) -> None:
        (directory / MANIFEST).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST
        if not directory.exists():
            raise PackageError(f"no package at {directory}")
        if not directory.is_dir() or not path.is_file():
            raise PackageError(
                f"{directory} is not a torch-max-backend package (no {MANIFEST})"
            )
        try:
            raw = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PackageError(f"{path} is not valid JSON: {e}") from None
        if not isinstance(raw, dict) or "format_version" not in raw:
            raise PackageError(f"{path} is not a torch-max-backend manifest")
        version = raw["format_version"]
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise PackageError(
                f"{path} has package format {version}, newer than this "
                f"torch-max-backend reads ({FORMAT_VERSION}); upgrade it"
            )
        try:
            specs = {
                key: [TensorSpec(**t) for t in raw[key]]
                for key in ("inputs", "outputs", "weights")
            }
            return cls(
                max_version=raw["max_version"],
                torch_version=raw["torch_version"],
                device=raw["device"],
                order=list(raw["order"]),
                format_version=version,
                extra=raw.get("extra", {}),
                checks=[_check(c) for c in raw.get("checks", [])],
                **specs,
            )
        except (KeyError, TypeError) as e:
            raise PackageError(f"{path} is incomplete or malformed: {e}") from None


def _check(item: Any) -> list[str]:
    error, message = item
    if error not in CHECK_ERRORS or not isinstance(message, str):
        raise TypeError(f"a check is an error name and a message, not {item!r}")
    return [error, message]
