"""Errors the backend raises, each naming what went wrong and where in user code.

``MaxCompilerError`` derives from Dynamo's ``ShortenTraceback`` so that Dynamo
lets it reach the user as it is, instead of burying it inside
``BackendCompilerFailed``: ``except MaxCompilerError`` works around
``torch.compile`` calls.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch._dynamo.exc import ShortenTraceback

from .internal_error import InternalTypeError as InternalTypeError

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')


class MaxCompilerError(ShortenTraceback):
    """A model, or part of one, could not be compiled to MAX."""

    def __init__(self, message: str) -> None:
        super().__init__(message, first_useful_frame=None)


def user_frame(node: torch.fx.Node) -> str | None:
    """The innermost user source line that produced ``node``, if Dynamo recorded one.

    Returns e.g. ``model.py:12 in forward: return x.tanh()``.
    """
    trace = node.meta.get("stack_trace")
    if not trace:
        return None
    lines = trace.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        match = _FRAME.match(lines[i])
        if match:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            where = f"{match['file']}:{match['line']} in {match['fn']}"
            return f"{where}: {code}" if code else where
    return None


def first_line(error: BaseException) -> str:
    """The first line of an error's message: what a one-line warning quotes."""
    return (str(error).strip().splitlines() or [""])[0]


def op_schema(target: object) -> str:
    schema = getattr(target, "_schema", None)
    return str(schema) if schema is not None else str(target)


@dataclass
class UnsupportedOp:
    """One operator the registry cannot lower, with every place it occurs."""

    name: str
    schema: str
    count: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    sources: list[str] = field(default_factory=list)


class UnsupportedOpsError(MaxCompilerError):
    """The graph uses ops with no MAX lowering; lists all of them at once."""

    def __init__(self, ops: list[UnsupportedOp]) -> None:
        self.ops = ops
        lines = [
            f"torch-max-backend cannot lower {len(ops)} operator(s) of this graph "
            "to MAX:"
        ]
        for op in ops:
            lines.append(f"  - {op.name} ({op.count} occurrence(s))")
            lines.append(f"      schema: {op.schema}")
            for reason, n in op.reasons.items():
                lines.append(f"      unsupported case ({n}x): {reason}")
            for source in op.sources[:3]:
                lines.append(f"      from: {source}")
        lines.append(
            "Add a lowering with torch_max_backend.MAPPING_TORCH_ATEN_TO_MAX"
            "[op] = fn, or report the missing op."
        )
        super().__init__("\n".join(lines))


def describe_value(value: object) -> str:
    """Short text for a node argument: shape and dtype for tensors."""
    meta = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
    if isinstance(meta, torch.Tensor):
        return f"Tensor(shape={list(meta.shape)}, dtype={meta.dtype}, device={meta.device})"
    if isinstance(meta, (list, tuple)):
        inner = ", ".join(describe_value(v) for v in meta)
        return f"[{inner}]"
    return repr(meta)


class LoweringError(MaxCompilerError):
    """A registered lowering failed on one node."""

    def __init__(self, node: torch.fx.Node, cause: BaseException) -> None:
        self.node = node
        args = ", ".join(describe_value(a) for a in node.args)
        kwargs = ", ".join(f"{k}={describe_value(v)}" for k, v in node.kwargs.items())
        source = user_frame(node)
        message = (
            f"lowering {node.target} to MAX failed at node {node.name!r}: "
            f"{type(cause).__name__}: {cause}\n"
            f"  schema: {op_schema(node.target)}\n"
            f"  arguments: ({args}{', ' if args and kwargs else ''}{kwargs})"
        )
        if source:
            message += f"\n  from: {source}"
        super().__init__(message)


class TracedBackwardHooksError(MaxCompilerError):
    """A backward traced into the graph would skip its inputs' gradient hooks
    (pipeline/traced_backward.py)."""


class UnsupportedCase(NotImplementedError):
    """Raised by a lowering for a case of its op that it does not cover."""
