"""benchmarks.compile_kernels: every case builds its graph (nothing compiles here)."""

from __future__ import annotations

import pytest
from max.graph import Graph

from benchmarks import compile_kernels


def _output_shapes(case: str) -> list[list[int]]:
    types, outputs = compile_kernels.CASES[case][1]()
    with Graph(case.replace("-", "_"), input_types=types) as graph:
        results = outputs([value.tensor for value in graph.inputs])
        graph.output(*results)
    return [[int(d) for d in r.shape] for r in results]


@pytest.mark.parametrize("case", sorted(compile_kernels.CASES))
def test_every_case_builds_a_graph(case):
    assert _output_shapes(case)


def test_variants_of_a_case_compute_the_same_shapes():
    # A variant differs in how it computes, never in what it returns.
    products = _output_shapes("products-shapes")
    assert len({str(s) for s in products}) == compile_kernels.PRODUCTS
    assert _output_shapes("products-symbolic") == products
    assert _output_shapes("products-by-sum") == products
    assert _output_shapes("linears-symbolic") == _output_shapes("linears")
    slices = _output_shapes("slices-gather")
    assert _output_shapes("slices-concat") == slices
    assert _output_shapes("slices-pad") == slices


def test_kernels_are_counted_from_cached_object_files(tmp_path):
    (tmp_path / ".mojo_cache").mkdir()
    (tmp_path / ".mojo_cache" / "not-an-object").write_bytes(b"MLIR")
    assert compile_kernels._kernels(tmp_path) == (0, 0)
