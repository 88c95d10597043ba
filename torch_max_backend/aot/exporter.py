"""``export``: a model to a package that runs without its code or torch.

torch.export traces the model; our decompositions and graph builder make the
MAX graph, whose inputs are the caller's inputs and the weights (so one
compiled artifact serves any weights of that shape); MAX compiles it; the
package gets the artifact, the weights as safetensors and a manifest.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sympy
import torch
from torch.export.graph_signature import InputKind, OutputKind

from .. import plan as max_plan
from ..errors import MaxCompilerError
from ..lower.builder import build_graph
from ..lower.families import register_families
from ..lower.product_choice import portable_products
from ..lower.registry import decomposition_table
from ..storage.cache_dir import max_version
from .manifest import GRAPH, WEIGHTS, Manifest, TensorSpec

_WEIGHT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)

# Checks torch.export leaves in the graph for its own re-tracing; the manifest
# and the runner check inputs instead, and MAX checks shapes at execute.
_EXPORT_ASSERTS = {
    torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten.sym_constrain_range.default,
}


def _drop_export_asserts(gm: torch.fx.GraphModule) -> None:
    for node in list(gm.graph.nodes):
        if (
            node.op == "call_function"
            and node.target in _EXPORT_ASSERTS
            and not node.users
        ):
            gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    gm.recompile()


def _numpy_dtype(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if dtype == torch.bfloat16 or not hasattr(__import__("numpy"), name):
        raise MaxCompilerError(
            f"export keeps weights and inputs as numpy arrays, which have no {dtype}"
        )
    return name


def _shape(meta: torch.Tensor) -> list[int | str]:
    shape: list[int | str] = []
    for size in meta.shape:
        if isinstance(size, torch.SymInt):
            expr = size.node.expr
            shape.append(int(expr) if expr.is_number else str(expr))
            if not expr.is_number and not isinstance(expr, sympy.Symbol):
                raise MaxCompilerError(f"input size {expr} is not a plain dimension")
        else:
            shape.append(int(size))
    return shape


def _spec(name: str, meta: torch.Tensor) -> TensorSpec:
    return TensorSpec(name, _numpy_dtype(meta.dtype), _shape(meta))


def export(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    output: str | Path,
    *,
    dynamic_shapes: Any = None,
    device: str = "cpu",
) -> Path:
    """Export ``model`` to the package directory ``output`` and return its path.

    ``dynamic_shapes`` is torch.export's (``torch.export.Dim`` per dynamic
    dim); those dims stay symbolic in the compiled graph. ``device`` is "cpu"
    or "gpu" (the model and inputs must already be there).
    """
    from max.driver import CPU, Accelerator, accelerator_count
    from max.engine import InferenceSession
    from safetensors.numpy import save_file

    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    register_families()
    if device == "gpu" and accelerator_count() == 0:
        raise MaxCompilerError("export for gpu needs a MAX accelerator on this machine")
    model = model.eval()
    with torch.no_grad():
        program = torch.export.export(
            model, tuple(example_inputs), dynamic_shapes=dynamic_shapes
        )
    program = program.run_decompositions(decomposition_table())
    signature = program.graph_signature
    for spec in signature.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            raise MaxCompilerError(
                f"the model updates {spec.target} when called ({spec.kind.name}); "
                "export takes inference graphs that change no state"
            )
    gm = program.graph_module
    _drop_export_asserts(gm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    # A package is compiled once and called many times: every product on
    # MAX's matmul kernel, the fastest call (lower/products.py).
    # A package may run on another machine: no vendor library path in it.
    with portable_products():
        # The package's inputs are the model's as torch lays them out.
        built = build_graph(gm, summed_products=False, channels_last_views=False)
    if any(slot.kind is not max_plan.OutputKind.GRAPH for slot in built.plan.outputs):
        raise MaxCompilerError(
            "export needs every output computed by the graph (an output that "
            "is an input, a size or a constant is not supported)"
        )

    user_index: dict[str, int] = {}
    weight_of: dict[str, str] = {}
    for spec in signature.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            user_index[name] = len(user_index)
        elif spec.kind in _WEIGHT_KINDS:
            weight_of[name] = spec.target
    inputs: list[TensorSpec] = [TensorSpec("", "", [])] * len(user_index)
    weights: dict[str, torch.Tensor] = {}
    order: list[str] = []
    for j, source in enumerate(built.plan.inputs):
        if source.kind is max_plan.InputKind.SEED:
            raise MaxCompilerError("export does not support random ops yet")
        if source.kind in (max_plan.InputKind.INT, max_plan.InputKind.NUMBER):
            raise MaxCompilerError("export does not support symbolic int inputs")
        if source.kind is max_plan.InputKind.CONSTANT:
            name = f"__constant_{j}"
            weights[name] = built.constants[source.index]
            order.append(f"weight:{name}")
            continue
        node = placeholders[source.index]
        if node.name in user_index:
            k = user_index[node.name]
            inputs[k] = _spec(f"input_{k}", node.meta["val"])
            order.append(f"input:{k}")
        else:
            target = weight_of[node.name]
            value = program.state_dict.get(target)
            if value is None:
                value = program.constants[target]
            weights[target] = value
            order.append(f"weight:{target}")
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = [
        _spec(f"output_{i}", item.meta["val"])
        for i, item in enumerate(out_node.args[0])
    ]
    manifest = Manifest(
        max_version=max_version(),
        torch_version=torch.__version__,
        device=device,
        inputs=inputs,
        outputs=outputs,
        weights=[_spec(name, t) for name, t in weights.items()],
        order=order,
        checks=[[c.error, c.message] for c in built.plan.checks],
    )

    session = InferenceSession(devices=[Accelerator() if device == "gpu" else CPU()])
    compiled = session.compile(built.graph)
    target = Path(output)
    # Written beside the target and moved into place: a failed export never
    # leaves a half-written package behind.
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
    try:
        compiled.export_mef(str(staging / GRAPH))
        save_file(
            {n: t.detach().cpu().contiguous().numpy() for n, t in weights.items()},
            str(staging / WEIGHTS),
        )
        manifest.write(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
