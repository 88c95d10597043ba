"""A fingerprint of everything that decides the MAX graph built from an ATen graph.

It is taken of the graph the FX passes' rewrites made (lower/passes/); what
the analysis passes find follows from that graph and from the caller outputs
named in the header, so the fingerprint covers the passes' output.

Two graphs with one fingerprint build the same MAX graph and the same plan:
the fingerprint covers every node's op, arguments and fake-tensor metadata
(dtypes, sizes with their symbols, strides, devices), the lowering chosen for
each op, the default dtype, torch's float32 matmul precision, this package's
own source files, and the torch and MAX versions.
What it leaves out is what the build reads at run time anyway: the values of
graph attributes (constants are fed as inputs, never baked in).

A graph whose build may depend on anything else gets no fingerprint (None):
an op outside the ``aten`` and ``prims`` namespaces that this package does
not lower by name (a user's Mojo kernel, whose source lives outside this
package), a higher-order op, an argument of a kind not described here.
"""

from __future__ import annotations

import functools
import hashlib
import operator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
from torch._ops import OpOverload

from ... import logs
from ..kit import device_of
from ..passes import CallerOutputs
from ..registry import MAPPING_TORCH_ATEN_TO_MAX, strategy_for
from ..row_products import ROW_PRODUCTS
from .capability import lowering_of
from .sym_numbers import SYM_TARGETS

_PACKAGE = Path(__file__).resolve().parents[2]
_OWN_NAMESPACES = ("aten", "prims")
# Ops this package defines for its own rewrites: its sources describe them.
_OWN_OPS = frozenset({ROW_PRODUCTS})
_OWN_MODULES = "torch_max_backend."
_log = logs.get_logger("compile")
_PLAIN = (bool, int, float, str, type(None))
_NAMED = (torch.dtype, torch.device, torch.layout, torch.memory_format)


class _Unknown(Exception):
    """Something the fingerprint cannot describe: the graph gets none."""


@functools.cache
def code_version() -> str:
    """A digest of this package's sources (Python and Mojo) and of the torch
    and MAX versions: a change to any of them changes every fingerprint."""
    sha = hashlib.sha256()
    for name in ("torch", "max"):
        try:
            sha.update(f"{name} {version(name)}\n".encode())
        except PackageNotFoundError:
            sha.update(f"{name} unknown\n".encode())
    for path in sorted(_PACKAGE.rglob("*")):
        if path.suffix in (".py", ".mojo") and path.is_file():
            sha.update(path.relative_to(_PACKAGE).as_posix().encode())
            sha.update(path.read_bytes())
    return sha.hexdigest()


def _meta(value: Any) -> str:
    """A fake tensor's dtype, sizes, strides and device; a SymInt's expression."""
    if isinstance(value, torch.Tensor):
        return (
            f"T({value.dtype},{tuple(str(s) for s in value.shape)},"
            f"{tuple(str(s) for s in value.stride())},{device_of(value)})"
        )
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_meta(v) for v in value) + "]"
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"S({value.node.expr})"
    if isinstance(value, _PLAIN):
        return repr(value)
    raise _Unknown(f"metadata {type(value).__name__}")


def _argument(value: Any, index: dict[torch.fx.Node, int]) -> str:
    if isinstance(value, torch.fx.Node):
        return f"%{index[value]}"
    if isinstance(value, (list, tuple)):
        inner = ",".join(_argument(v, index) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(f"{k!r}:{_argument(v, index)}" for k, v in sorted(value.items()))
            + "}"
        )
    if isinstance(value, (*_PLAIN, *_NAMED)):
        return repr(value)
    raise _Unknown(f"argument {type(value).__name__}")


def _target(node: torch.fx.Node) -> str:
    target = node.target
    if node.op != "call_function":
        return str(target)
    if target in SYM_TARGETS:
        module = getattr(target, "__module__", None)
        where = "operator" if module in (None, "_operator") else module
        return f"{where}.{target.__name__}"
    if not isinstance(target, OpOverload) or not _described(target):
        raise _Unknown(f"op {target}")
    fn = lowering_of(node)
    if fn is None or not fn.__module__.startswith(_OWN_MODULES):
        raise _Unknown(f"op {target} without a lowering of ours")
    # A strategy chosen by measurement on this machine (product_choice.py)
    # is part of what the graph is: another machine's choice builds another.
    strategy = strategy_for(fn, node)
    chosen = "" if strategy is None else f":{strategy}"
    return f"{target}:{fn.__module__}.{fn.__qualname__}{chosen}"


def _described(op: OpOverload) -> bool:
    """ATen and prims ops, the ops of this package's rewrites, and other
    libraries' ops that this package lowers by name (registry.defer): their
    lowerings are its own sources."""
    return (
        op.namespace in _OWN_NAMESPACES
        or op in _OWN_OPS
        or MAPPING_TORCH_ATEN_TO_MAX.lowers_by_name(op)
    )


def _attribute(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    value = operator.attrgetter(node.target)(gm)
    if not isinstance(value, torch.Tensor):
        raise _Unknown(f"attribute {type(value).__name__}")
    return _meta(value)


def graph_fingerprint(
    gm: torch.fx.GraphModule,
    eager_layouts: CallerOutputs | None = None,
    summed_products: bool = True,
) -> str | None:
    """The fingerprint of the MAX graph and plan ``gm`` builds (with
    ``build_graph``'s ``eager_layouts`` and ``summed_products``), or None
    when the graph holds something the fingerprint cannot describe."""
    from ..families import register_families

    register_families()  # lowerings are part of it
    # Python floats in arguments promote to the default dtype.
    header = f"{code_version()}\ndefault dtype {torch.get_default_dtype()}\n"
    # float32 products on a GPU are built for it (float32_products.py).
    header += f"float32 matmul precision {torch.get_float32_matmul_precision()}\n"
    if eager_layouts is not None:
        header += f"eager layouts of {eager_layouts}\n"
    if not summed_products:
        header += "every product a matmul\n"
    sha = hashlib.sha256(header.encode())
    index: dict[torch.fx.Node, int] = {}
    try:
        for i, node in enumerate(gm.graph.nodes):
            index[node] = i
            line = (
                f"{node.op} {_target(node)} "
                f"{_argument(node.args, index)} {_argument(node.kwargs, index)} "
                f"{_meta(node.meta.get('val'))}"
            )
            if node.op == "get_attr":
                line += f" {_attribute(gm, node)}"
            sha.update(line.encode())
            sha.update(b"\n")
    except _Unknown as e:
        _log.debug("torch-max-backend: no fingerprint: %s", e)
        return None
    return sha.hexdigest()
