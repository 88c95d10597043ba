"""Half-precision math is computed in float32 and rounded once, as eager's
kernels compute it (MAX's float16 tanh was up to 137 ulps off, and expm1 and
sinh overflowed to inf where eager's results are finite)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend


def _as_close_to_exact_as_eager(
    got: torch.Tensor, want: torch.Tensor, exact: torch.Tensor
) -> None:
    """``got`` (ours) at most twice eager's ``want`` error against the float64
    ``exact`` result, in ulps of the output's scale (or within one ulp)."""
    ulp = torch.finfo(want.dtype).eps * exact.abs().max()
    ours = (got.double() - exact).abs().max() / ulp
    eagers = (want.double() - exact).abs().max() / ulp
    assert ours <= max(2 * eagers, 1.0), (want.dtype, ours, eagers)


def _functions(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (
        torch.tanh(x),
        torch.sigmoid(x),
        F.gelu(x),
        F.silu(x),
        torch.expm1(x),
        torch.sinh(x),
        torch.atan(x),
        torch.erf(x),
        x.abs() ** 1.5,
        torch.pow(x.abs(), x / 4),
        x / 3.7,
        torch.log(x.abs() + 0.1),
        torch.softmax(x.reshape(40, -1), -1),
        torch.log_softmax(x.reshape(40, -1), 0),
    )


def test_half_precision_functions_round_as_eager_does(max_calls):
    torch.manual_seed(0)
    # Spread over float16's range, up to where exp(x) stays finite.
    h = (torch.randn(4000) * 3).clamp(-11, 11).to(torch.float16)
    b = (torch.randn(4000) * 3).to(torch.bfloat16)

    def fn(h, b):
        return _functions(h) + _functions(b)

    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
    for i, (got, want) in enumerate(zip(compiled(h, b), fn(h, b), strict=True)):
        # Within one unit in the last place (float16's default rtol 1e-3 is
        # about one; bfloat16's 1.6e-2 two): a result computed in float32 and
        # rounded may land on the other side of a rounding boundary.
        eps = torch.finfo(want.dtype).eps
        torch.testing.assert_close(
            got, want, rtol=eps, atol=1e-5, equal_nan=True, msg=f"output {i}"
        )
    assert max_calls.count == 1


def test_half_precision_softmax_gradients_are_as_accurate_as_eager(max_calls):
    # The backward's products and row sums in float32, as eager's kernels
    # take them: in bfloat16 they were 1.7x further from the float64 gradient
    # than eager's.
    torch.manual_seed(0)
    x = torch.randn(16, 512).to(torch.bfloat16).requires_grad_()
    weights = torch.randn(16, 512).to(torch.bfloat16)

    def fn(x):
        return (torch.softmax(x, -1) * weights).sum() + (
            torch.log_softmax(x, -1) * weights
        ).sum()

    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
    (got,) = torch.autograd.grad(compiled(x), x)
    (want,) = torch.autograd.grad(fn(x), x)
    exact = x.detach().double().requires_grad_()
    (truth,) = torch.autograd.grad(fn(exact), exact)
    ours = (got.double() - truth).abs().max()
    eagers = (want.double() - truth).abs().max()
    assert ours <= eagers * 1.1, (ours, eagers)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1


def test_half_precision_batched_products_and_convolutions_accumulate_in_float32(
    max_calls,
):
    # MAX's CPU batched matmul and convolutions added float16/bfloat16
    # products in half precision: 5-8 ulps of the output's scale off the
    # float64 result, where eager's are within half an ulp.
    def fn(a, b, small, big, filters):
        return (
            torch.matmul(a, b),
            F.conv2d(small, filters, padding=1),  # the im2col strategy
            F.conv2d(big, filters, padding=1),  # MAX's own kernel
        )

    torch.manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        args = [
            torch.randn(2, 8, 576),
            torch.randn(2, 576, 196),
            torch.randn(2, 64, 14, 14),
            torch.randn(2, 64, 32, 32),
            torch.randn(8, 64, 3, 3) * 0.1,
        ]
        args = [a.to(dtype) for a in args]
        compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
        for got, want, exact in zip(
            compiled(*args), fn(*args), fn(*(a.double() for a in args)), strict=True
        ):
            _as_close_to_exact_as_eager(got, want, exact)
    assert max_calls.count == 2


def test_half_precision_convolution_gradients_accumulate_in_float32(max_calls):
    # The weight's gradient sums over every batch row and pixel, the input's
    # over every filter tap: in half precision both drifted from eager.
    torch.manual_seed(0)
    x = torch.randn(4, 16, 12, 12).to(torch.bfloat16).requires_grad_()
    w = (torch.randn(32, 16, 3, 3) * 0.1).to(torch.bfloat16).requires_grad_()
    out_grad = torch.randn(4, 32, 12, 12).to(torch.bfloat16)

    def fn(x, w):
        return (F.conv2d(x, w, padding=1) * out_grad).sum()

    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
    got = torch.autograd.grad(compiled(x, w), (x, w))
    want = torch.autograd.grad(fn(x, w), (x, w))
    exact_args = [t.detach().double().requires_grad_() for t in (x, w)]
    exact = torch.autograd.grad(fn(*exact_args), exact_args)
    for g, e, t in zip(got, want, exact, strict=True):
        _as_close_to_exact_as_eager(g, e, t)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1


def test_half_precision_volumes_pools_and_bags_accumulate_in_float32(max_calls):
    # conv3d's and average pooling's windows and an embedding bag's rows were
    # added in half precision: 5-6, 1.4 and 15 ulps of the scale off.
    def fn(volume, filters, image, table, indices, offsets):
        return (
            F.conv3d(volume, filters, padding=1),
            F.avg_pool2d(image, 3),
            F.embedding_bag(indices, table, offsets, mode="sum"),
        )

    torch.manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        floats = [
            torch.randn(1, 16, 8, 8, 8),
            torch.randn(8, 16, 3, 3, 3) * 0.1,
            torch.randn(2, 64, 14, 14),
            torch.randn(1000, 64),
        ]
        args = [f.to(dtype) for f in floats] + [
            torch.randint(0, 1000, (2000,)),
            torch.tensor([0, 500, 1999]),
        ]
        exact_args = [a.double() if a.is_floating_point() else a for a in args]
        compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
        for got, want, exact in zip(
            compiled(*args), fn(*args), fn(*exact_args), strict=True
        ):
            _as_close_to_exact_as_eager(got, want, exact)
    assert max_calls.count == 2


def _arithmetic(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # torch takes a number as a float32 (x * 0.1 rounded 0.1 to bfloat16
    # first: 51 of 256 values a unit off, x / 1.7 90) and scales and adds in
    # float32 before one rounding (an add with alpha rounded twice: 22).
    return (
        x * 0.1,
        y / 1.7,
        x - y * y,
        0.7 - x,
        torch.add(x, y, alpha=0.1),
        (x * y + x) * y,
    )


def test_half_precision_arithmetic_takes_float32_numbers_and_rounds_once(max_calls):
    torch.manual_seed(5)
    for dtype in (torch.bfloat16, torch.float16):
        x, y = torch.randn(4, 64).to(dtype), torch.randn(4, 64).to(dtype)
        torch._dynamo.reset()
        got = torch.compile(_arithmetic, backend=max_backend)(x, y)
        for g, w in zip(got, _arithmetic(x, y), strict=True):
            assert g.dtype == dtype
            torch.testing.assert_close(g, w, rtol=0, atol=0)
    assert max_calls.count == 2
