"""A ``mojo_op`` run eagerly: a one-op MAX graph per input shapes, dtypes and
parameters, compiled once and executed on the runtime (the op's runtime half)."""

from __future__ import annotations

import inspect
import threading
from typing import Any

import torch
from max.engine import Model
from max.graph import Graph, TensorType

from ..dtypes import to_device_ref, to_max_dtype
from ..kernels.library import Parameter, custom
from ..kernels.mojo_declaration import MojoOpDeclaration, described_outputs
from .compiled_graph import as_buffer
from .session import compile_graph


class EagerMojoOp:
    """The eager kernel registered for the op's CPU and CUDA dispatch keys."""

    def __init__(self, declaration: MojoOpDeclaration) -> None:
        self.declaration = declaration
        self._models: dict[tuple, Model] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        op = self.declaration
        bound, tensors, parameters = op.split(args, kwargs)
        if not tensors:
            raise TypeError(f"{op.name}: a Mojo op needs at least one tensor input")
        device = tensors[0].device
        for t in tensors:
            if t.device != device:
                raise ValueError(
                    f"{op.name}: inputs on {device} and {t.device}; a Mojo op "
                    "runs on one device"
                )
        # The description runs on meta copies, argument by argument as bound.
        meta = inspect.BoundArguments(
            op.signature,
            {
                k: torch.empty(v.shape, dtype=v.dtype, device="meta")
                if isinstance(v, torch.Tensor)
                else v
                for k, v in bound.arguments.items()
            },
        )
        with torch.device("meta"):  # whatever else it allocates stays meta too
            described = op.describe(*meta.args, **meta.kwargs)
        outputs = described_outputs(described, op.name)
        key = (
            str(device),
            tuple((t.dtype, tuple(t.shape)) for t in tensors),
            tuple(sorted(parameters.items())),
        )
        with self._lock:
            model = self._models.get(key)
            if model is None:
                model = self._compile(tensors, outputs, parameters, device)
                self._models[key] = model
        results = model.execute(*(as_buffer(t.contiguous()) for t in tensors))
        values = [torch.from_dlpack(r) for r in results]
        return tuple(values) if isinstance(described, (tuple, list)) else values[0]

    def _compile(
        self,
        tensors: list[torch.Tensor],
        outputs: list[torch.Tensor],
        parameters: dict[str, Parameter],
        device: torch.device,
    ) -> Model:
        op = self.declaration
        ref = to_device_ref(device)
        types = [TensorType(to_max_dtype(t.dtype), t.shape, ref) for t in tensors]
        with Graph(f"mojo_op_{op.kernel}", input_types=types) as graph:
            results = custom(
                op.library,
                op.kernel,
                [v.tensor for v in graph.inputs],
                [TensorType(to_max_dtype(o.dtype), o.shape, ref) for o in outputs],
                ref,
                parameters,
            )
            graph.output(*results)
        # The op keeps its one-op models itself, not the process's table.
        model, _, _ = compile_graph(graph, device)
        return model
