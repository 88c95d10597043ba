"""A ``mojo_op`` inside a max_backend graph: a MAX custom op (the op's lowering half)."""

from __future__ import annotations

from typing import Any

from max.graph import DeviceRef, TensorType

from ..dtypes import to_max_dtype
from ..kernels.library import custom
from ..kernels.mojo_declaration import MojoOpDeclaration, described_outputs
from .context import current
from .shapes import max_dim


class MojoOpLowering:
    """The lowering registered for the op's ATen overload."""

    def __init__(self, declaration: MojoOpDeclaration) -> None:
        self.declaration = declaration

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        op = self.declaration
        _, values, parameters = op.split(args, kwargs)
        ctx = current()
        meta = ctx.out_meta
        outputs = described_outputs(meta, op.name)
        device: DeviceRef = ctx.device
        out_types = [
            TensorType(
                to_max_dtype(o.dtype),
                [max_dim(s, f"{op.name}'s output") for s in o.shape],
                device,
            )
            for o in outputs
        ]
        results = custom(op.library, op.kernel, values, out_types, device, parameters)
        return results if isinstance(meta, (tuple, list)) else results[0]
