"""One input's products with two or three weights, as one op and one kernel.

A decode step projects each token's hidden row by several weights in turn
(llama-, Mistral- and Qwen-style models: q, k and v; gate and up). Each of
those products is a kernel of its own in a MAX graph, and MAX charges each
kernel a fixed cost of 8-15 us on the CPU, most of the time of a small
projection such as a 512 KB k or v (docs/benchmarks.md). The pass
``passes/sibling_products.py`` makes such siblings one
``torch_max_backend::row_products`` node; its lowering
(``lower/ops/linalg.py``) runs them as one Mojo kernel
(``kernels/mojo_grouped``), whose tasks take blocks of all the weights' rows
in turn. Wherever the node falls back, PyTorch runs the products as
``F.linear`` computes them.
"""

from __future__ import annotations

import torch
from max.graph import TensorType, TensorValue

from ..kernels.library import GROUPED, custom
from .shapes import static_size

# The kernel's arities: ``torch_max_backend_two_row_products`` and
# ``torch_max_backend_three_row_products``.
KERNELS = {2: "two", 3: "three"}
# The rows it takes, each a compile-time count.
MAX_ROWS = 8


def _linear_each(x: torch.Tensor, weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """``[x @ w.T for w in weights]``: x [rows, K], each weight [N, K]."""
    return [torch.nn.functional.linear(x, w) for w in weights]


def _row_products_fake(
    x: torch.Tensor, weights: list[torch.Tensor]
) -> list[torch.Tensor]:
    return [x.new_empty(x.shape[0], w.shape[0]) for w in weights]


# Defined by calls, not decorators: the type checker's import hook wraps a
# decorated function after its decorators, which would hide the op.
row_products_op = torch.library.custom_op(
    "torch_max_backend::row_products", mutates_args=()
)(_linear_each)
row_products_op.register_fake(_row_products_fake)

ROW_PRODUCTS = torch.ops.torch_max_backend.row_products.default


def row_products(x: TensorValue, weights: list[TensorValue]) -> list[TensorValue]:
    """``x @ w.T`` for each of two or three weights stored [N, K], by one
    kernel told the (static) row count."""
    rows = static_size(x.shape[0])
    assert rows is not None and len(weights) in KERNELS  # the pass checked
    return custom(
        GROUPED,
        f"torch_max_backend_{KERNELS[len(weights)]}_row_products",
        [x, *weights],
        [TensorType(x.dtype, [x.shape[0], w.shape[0]], x.device) for w in weights],
        x.device,
        parameters={"rows": rows},
    )
