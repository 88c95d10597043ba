"""Elementwise lowerings, all in one compiled graph per test to keep compiles few."""

from __future__ import annotations

import pytest
import torch

from .family_check import check_family
from .helpers import check_against_eager


def test_arithmetic_and_math(max_calls):
    def fn(x, y, i):
        pos = y.abs() + 0.5
        return (
            x + y,
            x - 2 * y,
            torch.add(x, y, alpha=3),
            x * y,
            x / pos,
            i / 2,  # integer true division gives float
            torch.div(i, 3, rounding_mode="floor"),
            torch.div(i, -3, rounding_mode="trunc"),
            torch.div(x, pos, rounding_mode="floor"),
            torch.remainder(i, 3),
            -x,
            torch.maximum(x, y),
            torch.minimum(x, y),
            torch.clamp(x, -0.5, 0.5),
            x**2,
            x**3,
            pos**0.5,
            pos**-1.5,
            torch.pow(pos, y),
            torch.exp(x),
            torch.log(pos),
            torch.log1p(pos),
            torch.sqrt(pos),
            torch.rsqrt(pos),
            torch.sin(x),
            torch.cos(x),
            torch.erf(x),
            torch.floor(x * 3),
            torch.ceil(x * 3),
            torch.trunc(x * 3),
            torch.sign(x),
            torch.reciprocal(pos),
            torch.expm1(x),
            i * 3 + 1,
            1 - x,
        )

    x, y = torch.randn(4, 5), torch.randn(4, 5)
    i = torch.arange(-10, 10).reshape(4, 5)
    check_against_eager(fn, x, y, i)
    assert max_calls.count == 1


def test_negating_unsigned_integers_wraps_around_as_in_eager(max_calls):
    # MAX's negate takes signed values only: the graph failed to compile.
    def fn(u, i):
        return -u, -(u * 3), -i

    u = torch.tensor([0, 1, 7, 128, 255], dtype=torch.uint8)
    i = torch.tensor([0, 1, -128, 127, -5], dtype=torch.int8)
    check_against_eager(fn, u, i)
    assert max_calls.count == 1


def test_integer_scalars_out_of_the_tensors_range_wrap_as_in_eager(max_calls):
    # Eager casts a Python int to a small integer tensor's dtype with
    # wrap-around (300 is 44 in int8); the build raised "value cannot be
    # converted to type int8 without overflow" instead.
    def fn(i, u, s, wide):
        return (
            i * 300,
            i + 300,
            300 - i,
            i < 300,
            i == 300,
            i // 300,
            i % 300,
            i & 300,
            i / 300,
            torch.maximum(i, wide),
            u > -1,
            u * -1,
            s * 70000,
            # A number as the first operand wraps the same way.
            torch.pow(300, u),
            torch.pow(-129, i),
            300 % i,
        )

    i = torch.tensor([1, -1, 100, 127, -128], dtype=torch.int8)
    u = torch.tensor([0, 1, 255, 128, 7], dtype=torch.uint8)
    s = torch.tensor([1, -3, 2, 0, 7], dtype=torch.int16)
    check_against_eager(fn, i, u, s, torch.tensor(300))
    assert max_calls.count == 1
    # Where eager refuses such a number (a bound, a fill value), so do we.
    with pytest.raises(RuntimeError, match="cannot be converted to type int8"):
        torch.compile(lambda t: torch.clamp(t, max=300), backend="max")(i)
    with pytest.raises(RuntimeError, match="cannot be converted to type uint8"):
        torch.compile(lambda t: torch.where(t > 0, t, 300), backend="max")(u)
    with pytest.raises(RuntimeError, match="cannot be converted to type uint8"):
        torch.compile(lambda t: torch.where(t > 0, 300, t), backend="max")(u)


def test_nan_is_true_and_unequal_and_integers_round_to_themselves(max_calls):
    # MAX's cast made NaN False (torch: nonzero, so True), as did x != 0.5,
    # any() and logical ops; floor, ceil, trunc
    # and round of an integer tensor failed MAX's compile and ran in PyTorch.
    def fn(x, h, i, u):
        return (
            x.bool(),
            h.to(torch.bool),
            torch.zeros_like(x, dtype=torch.bool).copy_(x),
            torch.floor(i),
            torch.ceil(i),
            torch.trunc(i.to(torch.int32)),
            torch.round(u),
            # MAX's not_equal is false where a side is NaN; torch's is true.
            x != 0.5,
            x != x.flip(0),
            x.flip(0) != x,
            torch.logical_not(x),
            torch.logical_and(x, h.float()),
            x[:3].any(),  # NaN, 0, -0
            torch.linalg.vector_norm(x, 0),
            # Integers into float functions (the lowering failed to build).
            torch.sigmoid(i),
            torch.tanh(i),
        )

    x = torch.tensor([float("nan"), 0.0, -0.0, float("inf"), 1e-30, -2.0])
    i = torch.tensor([-128, -1, 0, 5, 127, 3], dtype=torch.int8)
    check_against_eager(fn, x, x.to(torch.bfloat16), i, i.to(torch.uint8))
    assert max_calls.count == 1


def test_comparisons_logic_and_where(max_calls):
    def fn(x, y, i):
        return (
            x > y,
            x >= 0.25,
            x < y,
            x <= 0,
            x == y,
            i != 2,
            i > 1.5,  # int tensor against a float scalar compares as float
            torch.logical_and(x > 0, y > 0),
            torch.logical_or(x > 0, y > 0),
            torch.logical_xor(x > 0, y > 0),
            torch.logical_not(x > 0),
            (x > 0) & (y > 0),
            (x > 0) | (y > 0),
            ~(x > 0),
            torch.where(x > 0, x, y),
            torch.where(x > 0, x, 0.0),
            x.masked_fill(x > 0, -1.0),
            i + 1.5,
            torch.isnan(x / x),
        )

    x, y = torch.randn(4, 5), torch.randn(4, 5)
    x[0, 0] = 0.0
    i = torch.arange(20).reshape(4, 5)
    check_against_eager(fn, x, y, i)
    assert max_calls.count == 1


# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = ("prims.fma.default",)


def test_elementwise_lowerings_build_for_every_opinfo_case():
    check_family("elementwise", OUTSIDE_OPINFO)
