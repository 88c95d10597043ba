"""bfloat16 results rounded from float32 on the CPU by our kernel, not MAX's
cast (several times slower there), bit for bit as torch rounds them."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend
from torch_max_backend.lower.bfloat16_rounding import ROUNDED_BY_KERNEL_FROM

_KERNEL = "torch_max_backend_round_bfloat16"


def _values(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Random bfloat16 values with the cases rounding must keep: NaN,
    infinities, zeros of both signs, the largest finite value."""
    torch.manual_seed(seed)
    x = torch.randn(shape).to(torch.bfloat16)
    flat = x.view(-1)
    flat[:6] = torch.tensor(
        [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 3.3895e38]
    ).to(torch.bfloat16)
    return x


def _elementwise(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # Each op's float32 result rounded to bfloat16, as eager rounds them
    # (add with alpha: torch scales and adds in float32, then rounds once).
    chain = (x * y + x) * y - x
    return (
        chain,
        torch.add(x, y, alpha=0.1),
        F.silu(x) * y,
        x.float().mul(1.0001).to(torch.bfloat16),
    )


def test_bfloat16_elementwise_results_round_as_eager_in_our_kernel(
    max_calls, graph_texts
):
    shape = (64, ROUNDED_BY_KERNEL_FROM // 64 + 8)
    x, y = _values(shape, 0), _values(shape, 1)
    compiled = torch.compile(_elementwise, backend=max_backend)
    got, want = compiled(x, y), _elementwise(x, y)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    assert max_calls.count == 1
    (text,) = graph_texts()
    # Every rounding of a large result in our kernel: the chain's four ops,
    # add, silu and the product after it, the explicit cast.
    assert text.count(_KERNEL) == 8


def test_small_bfloat16_results_keep_maxs_cast(max_calls, graph_texts):
    x, y = _values((4, 33), 2), _values((4, 33), 3)
    compiled = torch.compile(_elementwise, backend=max_backend)
    got, want = compiled(x, y), _elementwise(x, y)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        # add with alpha: MAX fuses the scaling into the add (one rounding
        # in float32, as torch's vectorized loop) except in a row's last
        # values, where a float32 unit can change the bfloat16 by one.
        tolerance = 8e-3 if i == 1 else 0
        torch.testing.assert_close(g, w, rtol=tolerance, atol=0, equal_nan=True)
    assert max_calls.count == 1
    assert _KERNEL not in graph_texts()[0]


def _attention_and_batched_product(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True), q @ k.transpose(
        -1, -2
    )


def test_bfloat16_attention_and_batched_products_round_in_our_kernel(
    max_calls, graph_texts
):
    # Both computed in float32 on the CPU and rounded once at the end.
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 4, 64, 64).to(torch.bfloat16) for _ in range(3))
    compiled = torch.compile(_attention_and_batched_product, backend=max_backend)
    with torch.no_grad():
        got = compiled(q, k, v)
        want = _attention_and_batched_product(q, k, v)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.bfloat16
        # Summed in float32 in another order than eager's: a unit apart.
        torch.testing.assert_close(g, w, rtol=8e-3, atol=1e-2)
    assert max_calls.count == 1
    assert graph_texts()[0].count(_KERNEL) == 2


def _rounded_by_kernel(values: torch.Tensor, transposed: bool) -> torch.Tensor:
    """``values`` (float32, 2-d) rounded by our kernel in a MAX graph of its
    own, given as they are or transposed in the graph."""
    from max.driver import CPU, Buffer
    from max.dtype import DType
    from max.engine import InferenceSession
    from max.graph import DeviceRef, Graph, TensorType, ops

    from torch_max_backend.kernels.library import ROUNDING, custom

    cpu = DeviceRef.CPU()
    source = values.t().contiguous() if transposed else values
    with Graph(
        f"rounding_{'t' if transposed else 'dense'}_{values.shape[0]}x{values.shape[1]}",
        input_types=[TensorType(DType.float32, list(source.shape), cpu)],
    ) as graph:
        x = graph.inputs[0].tensor
        read = ops.transpose(x, 0, 1) if transposed else x
        (out,) = custom(
            ROUNDING,
            _KERNEL,
            [read],
            [TensorType(DType.bfloat16, list(values.shape), cpu)],
            cpu,
        )
        graph.output(out)
    model = InferenceSession(devices=[CPU()]).load(graph)
    (result,) = model._execute_device_tensors([Buffer.from_dlpack(source)])
    return torch.from_dlpack(result).clone()


def test_the_kernel_rounds_shared_runs_tails_and_transposes_as_torch():
    """One core's run below 2^18 values, the cores' shares from it (a count
    that is no multiple of 16: each share's tail), and a transposed input."""
    for shape, transposed in (((5, 52433), False), ((64, 264), True)):
        values = _values(shape, 5).float() * 1.0001
        values.view(-1)[6:9] = torch.tensor([1.00390625, 1.01171875, -3.0e38])
        # NaNs whose payloads would carry into the sign and exponent when
        # rounded as numbers (0x7FFFFFFF gave -0 while the kernel told NaNs
        # by `v != v`, which MAX's fast-math flags folded to false).
        values.view(torch.int32).view(-1)[9:13] = torch.tensor(
            [0x7FFFFFFF, 0x7FBFFFFF, -1, 0x7F800001], dtype=torch.int32
        )
        got = _rounded_by_kernel(values, transposed)
        torch.testing.assert_close(
            got, values.to(torch.bfloat16), rtol=0, atol=0, equal_nan=True
        )
