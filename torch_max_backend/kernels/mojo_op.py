"""``mojo_op``: a user's Mojo kernel as a PyTorch op, eager and compiled.

The decorated function declares the op: its annotations give the schema
(tensors, and int/float/bool/str arguments, which become the kernel's
compile-time parameters of the same names), and its body describes the
outputs from the inputs, e.g. ``return torch.empty_like(x)``. It runs only on
fake tensors, never on data. The result is a ``torch.library`` custom op:

- eagerly, on CPU (or CUDA) tensors, it runs the kernel through MAX: a
  one-op graph compiled once per input shapes, dtypes and parameters;
- under Dynamo its description is the fake implementation, so the op is
  traced into the graph instead of breaking it;
- under max_backend it lowers to a MAX custom op inside the compiled graph;
- ``op.register_autograd(backward, setup_context=...)`` gives it a backward,
  written in PyTorch or with other Mojo ops.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from max.engine import Model
from max.graph import DeviceRef, Graph, TensorType, TensorValue

from ..lowering.context import current
from ..lowering.dtypes import to_device_ref, to_max_dtype
from ..lowering.registry import MAPPING_TORCH_ATEN_TO_MAX
from ..lowering.shapes import max_dim
from .library import MojoLibrary, Parameter, custom

_PARAMETER_TYPES = (bool, int, float, str)


def _outputs(value: object, op: str) -> list[torch.Tensor]:
    """The output tensor(s) a description returned, as a list."""
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    if not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise TypeError(
            f"{op}: the decorated function must return the op's output tensor(s) "
            f"(e.g. torch.empty_like(x)), got {value!r}"
        )
    return items


class _MojoOp:
    """What one ``mojo_op`` keeps: its kernel, schema split, compiled eager graphs."""

    def __init__(
        self, name: str, library: MojoLibrary, kernel: str, describe: Callable
    ) -> None:
        self.name, self.library, self.kernel = name, library, kernel
        self.describe = describe
        self.signature = inspect.signature(describe)
        self._models: dict[tuple, Model] = {}
        self._lock = threading.Lock()

    def split(
        self, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[inspect.BoundArguments, list[Any], dict[str, Parameter]]:
        """The arguments bound to the signature, the tensors among them in
        order, and the others as kernel parameters."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        tensors, parameters = [], {}
        for pname, value in bound.arguments.items():
            if isinstance(value, (torch.Tensor, TensorValue)):
                tensors.append(value)
            elif isinstance(value, _PARAMETER_TYPES):
                parameters[pname] = value
            else:
                raise TypeError(
                    f"{self.name}: argument {pname!r} is {type(value).__name__}; "
                    "a Mojo op takes tensors and bool/int/float/str parameters"
                )
        return bound, tensors, parameters

    # -- eager ---------------------------------------------------------------

    def eager(self, *args: Any, **kwargs: Any) -> Any:
        from ..runtime.compiled_graph import _as_buffer

        bound, tensors, parameters = self.split(args, kwargs)
        if not tensors:
            raise TypeError(f"{self.name}: a Mojo op needs at least one tensor input")
        device = tensors[0].device
        for t in tensors:
            if t.device != device:
                raise ValueError(
                    f"{self.name}: inputs on {device} and {t.device}; a Mojo op "
                    "runs on one device"
                )
        # The description runs on meta copies, argument by argument as bound.
        meta = inspect.BoundArguments(
            self.signature,
            {
                k: torch.empty(v.shape, dtype=v.dtype, device="meta")
                if isinstance(v, torch.Tensor)
                else v
                for k, v in bound.arguments.items()
            },
        )
        with torch.device("meta"):  # whatever else it allocates stays meta too
            described = self.describe(*meta.args, **meta.kwargs)
        outputs = _outputs(described, self.name)
        key = (
            str(device),
            tuple((t.dtype, tuple(t.shape)) for t in tensors),
            tuple(sorted(parameters.items())),
        )
        with self._lock:
            model = self._models.get(key)
            if model is None:
                model = self._compile_eager(tensors, outputs, parameters, device)
                self._models[key] = model
        results = model.execute(*(_as_buffer(t.contiguous()) for t in tensors))
        values = [torch.from_dlpack(r) for r in results]
        return tuple(values) if isinstance(described, (tuple, list)) else values[0]

    def _compile_eager(
        self,
        tensors: list[torch.Tensor],
        outputs: list[torch.Tensor],
        parameters: dict[str, Parameter],
        device: torch.device,
    ) -> Model:
        from ..runtime.session import compile_graph

        ref = to_device_ref(device)
        types = [TensorType(to_max_dtype(t.dtype), t.shape, ref) for t in tensors]
        with Graph(f"mojo_op_{self.kernel}", input_types=types) as graph:
            results = custom(
                self.library,
                self.kernel,
                [v.tensor for v in graph.inputs],
                [TensorType(to_max_dtype(o.dtype), o.shape, ref) for o in outputs],
                ref,
                parameters,
            )
            graph.output(*results)
        model, _ = compile_graph(graph, device)
        return model

    # -- inside max_backend graphs ------------------------------------------------

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        _, values, parameters = self.split(args, kwargs)
        ctx = current()
        meta = ctx.out_meta
        outputs = _outputs(meta, self.name)
        device: DeviceRef = ctx.device
        out_types = [
            TensorType(
                to_max_dtype(o.dtype),
                [max_dim(s, f"{self.name}'s output") for s in o.shape],
                device,
            )
            for o in outputs
        ]
        results = custom(
            self.library, self.kernel, values, out_types, device, parameters
        )
        return results if isinstance(meta, (tuple, list)) else results[0]


_LIBRARIES: dict[Path, MojoLibrary] = {}


def _library(source: Path) -> MojoLibrary:
    """One library per source: ops whose kernels share a file share its build
    (a graph must not load two libraries registering the same kernels)."""
    source = source.resolve()
    if source not in _LIBRARIES:
        tag = hashlib.sha256(str(source).encode()).hexdigest()[:8]
        stem = re.sub(r"\W", "_", source.stem) or "kernels"
        _LIBRARIES[source] = MojoLibrary(f"mojo_{stem}_{tag}", source)
    return _LIBRARIES[source]


def mojo_op(
    name: str,
    kernel: str | Path,
    *,
    kernel_name: str | None = None,
) -> Callable[[Callable[..., Any]], torch.library.CustomOpDef]:
    """Register a Mojo kernel as the PyTorch op ``name`` ("namespace::op").

    Args:
        name: the op's qualified name; it is then ``torch.ops.namespace.op``.
        kernel: a ``.mojo`` file, or a Mojo package directory (with an
            ``__init__.mojo``), registering the kernel with
            ``@extensibility.register("<kernel_name>")``.
        kernel_name: the name the kernel registers under; defaults to the
            op's name after "::".

    The decorated function gives the op's schema by its annotations and its
    outputs' shapes and dtypes by its body (it runs on fake tensors only).
    The library is built when the op is first run or compiled; a Mojo error
    then raises ``KernelBuildError`` with the compiler's message.
    """
    if "::" not in name:
        raise ValueError(f"a Mojo op's name is 'namespace::op', got {name!r}")
    short = name.split("::", 1)[1]
    source = Path(kernel)
    if not source.exists():
        raise FileNotFoundError(f"Mojo kernel source {source} does not exist")
    library = _library(source)

    def register(describe: Callable[..., Any]) -> torch.library.CustomOpDef:
        state = _MojoOp(name, library, kernel_name or short, describe)
        op = torch.library.custom_op(name, mutates_args=())(describe)
        op.register_fake(describe)
        for device_type in ("cpu", "cuda"):
            op.register_kernel(device_type, state.eager)
        overload = getattr(getattr(torch.ops, name.split("::")[0]), short).default
        MAPPING_TORCH_ATEN_TO_MAX[overload] = state.lower
        op._mojo = state  # for introspection and tests
        return op

    return register
