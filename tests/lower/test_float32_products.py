"""float32 products on a GPU keep float32's accuracy under torch's default
matmul precision ("highest"): MAX's GPU matmul runs float32 in TF32, so each
operand is split into parts TF32 holds exactly. Checked here on the CPU: the
parts, the sum of the parts' products, and what a TF32 matmul makes of them
(emulated in NumPy); the GPU run is tests/test_gpu.py's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from max import engine
from max.driver import CPU
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType
from torch.fx.experimental.proxy_tensor import make_fx

from torch_max_backend.lower.builder import graph_fingerprint
from torch_max_backend.lower.float32_products import split_matmul, tf32_exact_parts
from torch_max_backend.lower.products import product

_TF32_DROPPED_BITS = 13  # float32 keeps 23 fraction bits, TF32 10


def _run(graph: Graph, *arrays: np.ndarray) -> list[np.ndarray]:
    model = engine.InferenceSession(devices=[CPU()]).load(graph)
    return [out.to_numpy() for out in model.execute(*arrays)]


def _tf32(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to TF32 (nearest, ties away), as a tensor core reads it."""
    bits = x.astype(np.float32).view(np.uint32)
    half = np.uint32(1 << (_TF32_DROPPED_BITS - 1))
    mask = np.uint32(~((1 << _TF32_DROPPED_BITS) - 1) & 0xFFFFFFFF)
    return ((bits + half) & mask).view(np.float32)


@pytest.fixture(scope="module")
def parts_and_product() -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The parts of ``a``, and the split product of ``a`` and ``b``, run on MAX."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 512)).astype(np.float32)
    a[0, 0], a[1, 1], a[2, :2] = np.inf, -np.inf, [3e38, 1e-30]
    b = rng.standard_normal((512, 32)).astype(np.float32)
    cpu = DeviceRef.CPU()
    types = [TensorType(DType.float32, [64, 512], cpu)]
    types.append(TensorType(DType.float32, [512, 32], cpu))
    with Graph("split", input_types=types) as graph:
        x, y = (value.tensor for value in graph.inputs)
        graph.output(*tf32_exact_parts(x), split_matmul(x, y))
    *parts, got = _run(graph, a, b)
    return parts, a, got


def test_parts_sum_to_the_operand_and_tf32_holds_each(parts_and_product):
    parts, a, _ = parts_and_product
    finite = np.isfinite(a)
    total = parts[0].astype(np.float64) + parts[1] + parts[2]
    np.testing.assert_array_equal(total[finite], a[finite].astype(np.float64))
    assert np.isinf(parts[0][~finite]).all()
    for part in parts:
        held = part[np.isfinite(part)]
        np.testing.assert_array_equal(_tf32(held), held)  # no bit lost
    # Each part is at most 2^-8 of the one before it.
    assert (np.abs(parts[1]) <= np.abs(parts[0]) * 2.0**-8).all()


def test_split_product_is_float32_accurate(parts_and_product):
    _, a, got = parts_and_product
    rng = np.random.default_rng(0)
    rng.standard_normal((64, 512))
    b = rng.standard_normal((512, 32)).astype(np.float32)
    rows = np.isfinite(a).all(axis=1) & (np.abs(a).max(axis=1) < 1e30)
    want = a[rows].astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(want).max()
    assert np.abs(got[rows] - want).max() / scale < 1e-6
    # An infinite entry gives what torch's product gives: infinities.
    eager = torch.from_numpy(a[:2]) @ torch.from_numpy(b)
    assert eager.isinf().all()
    torch.testing.assert_close(torch.from_numpy(got[:2]), eager)


def test_tf32_products_of_the_parts_are_float32_accurate():
    # What a GPU does with the six products: each operand read as TF32.
    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 256)).astype(np.float32)
    b = rng.standard_normal((256, 16)).astype(np.float32)
    types = [TensorType(DType.float32, list(m.shape), DeviceRef.CPU()) for m in (a, b)]
    with Graph("parts", input_types=types) as graph:
        x, y = (value.tensor for value in graph.inputs)
        graph.output(*tf32_exact_parts(x), *tf32_exact_parts(y))
    a0, a1, a2, b0, b1, b2 = _run(graph, a, b)
    pairs = [(a0, b2), (a2, b0), (a1, b1), (a0, b1), (a1, b0), (a0, b0)]
    split = sum(_tf32(x).astype(np.float64) @ _tf32(y) for x, y in pairs)
    want = a.astype(np.float64) @ b.astype(np.float64)
    direct = _tf32(a).astype(np.float64) @ _tf32(b)
    scale = np.abs(want).max()
    assert np.abs(direct - want).max() / scale > 1e-5  # TF32 alone is not
    assert np.abs(split - want).max() / scale < 1e-6


def _matmuls_built(device: DeviceRef, dtype: DType) -> int:
    types = [TensorType(dtype, [4, 8], device), TensorType(dtype, [8, 4], device)]
    with Graph("one_product", input_types=types) as graph:
        graph.output(product(*(value.tensor for value in graph.inputs)))
    return str(graph).count("rmo.matmul")


@pytest.fixture
def precision():
    before = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(before)


def test_gpu_float32_products_split_unless_tf32_is_allowed(precision):
    gpu = DeviceRef.GPU(0)  # built, not compiled: no GPU needed
    assert _matmuls_built(gpu, DType.float32) == 6
    assert _matmuls_built(gpu, DType.bfloat16) == 1
    assert _matmuls_built(DeviceRef.CPU(), DType.float32) == 1
    precision("high")  # torch.backends.cuda.matmul.allow_tf32 = True says so
    assert _matmuls_built(gpu, DType.float32) == 1


def test_the_precision_is_part_of_the_fingerprint(precision):
    gm = make_fx(torch.mm)(torch.zeros(2, 3), torch.zeros(3, 2))
    highest = graph_fingerprint(gm)
    precision("high")
    assert graph_fingerprint(gm) != highest
