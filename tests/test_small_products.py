"""benchmarks.small_products: each shape's summed graph builds with the
matmul's result shape, and PyTorch's side is timed (nothing compiles here)."""

from __future__ import annotations

import pytest
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType, ops

from benchmarks import small_products
from torch_max_backend.lower.products import summed


@pytest.mark.parametrize("shape", small_products.SHAPES, ids=str)
def test_summed_and_matmul_graphs_agree_on_shape(shape):
    types = [
        TensorType(DType.float32, s, DeviceRef.CPU())
        for s in small_products._operand_shapes(shape)
    ]
    with Graph("shapes", input_types=types) as graph:
        a, b = (v.tensor for v in graph.inputs)
        assert list(summed(a, b).shape) == list(ops.matmul(a, b).shape)


def test_torch_side_times_every_shape():
    figures = small_products._torch_child(runs=1)
    assert sorted(figures) == sorted(str(s) for s in small_products.SHAPES)
    assert all(us > 0 for us in figures.values())
