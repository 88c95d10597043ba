"""Division: float remainders and fmods as eager computes them."""

from __future__ import annotations

import torch

from .family_check import check_family
from .helpers import check_against_eager

INF = float("inf")


def test_float_remainder_and_fmod_match_eager(max_calls):
    # Composed in the operands' precision, 100 % 0.1 gave 0 (eager 0.0999985,
    # 0.1 being a little above a tenth in float32) and an infinite divisor
    # gave NaN (eager: -10 % inf is inf, 15 % inf is 15). Floor division
    # likewise.
    def fn(a, b, h, g):
        return (
            torch.remainder(a, b),
            torch.fmod(a, b),
            a % 0.1,
            torch.fmod(a, -2.5),
            5.5 % b,
            torch.remainder(h, g),
            torch.fmod(h, g),
            # Eager's floor division subtracts the exact remainder: 1 // 0.1
            # is 9, where flooring the rounded quotient 10.0 gave 10.
            torch.div(a, b, rounding_mode="floor"),
            torch.floor_divide(a, 0.1),
            torch.div(h, g, rounding_mode="floor"),
            torch.div(a, b, rounding_mode="trunc"),
            torch.div(h, g, rounding_mode="trunc"),
        )

    a = torch.tensor([
        15.0, -10.0, 35.0, -25.0, 100.0, -100.0, 5.5, -5.5, 0.0,
        7.0, 1e6 + 0.3, 9.0, 1.0, -0.0, INF, -3.0, 2.999,
    ])  # fmt: skip
    b = torch.tensor([
        INF, INF, -INF, -INF, 0.1, 0.1, -2.0, 2.0, 3.0,
        0.0, 0.7, 3.0, 0.1, 3.0, 2.0, -INF, 1.0,
    ])  # fmt: skip
    h = torch.tensor([100.0, -7.5, 3.0, 1000.0, 2.0, 1.0], dtype=torch.bfloat16)
    g = torch.tensor([0.1, 2.0, -INF, 0.3, 0.6679, 0.0], dtype=torch.bfloat16)
    check_against_eager(fn, a, b, h, g, rtol=0, atol=0)
    assert max_calls.count == 1


# Lowerings no core OpInfo case reaches (non-core overloads): hand-written
# and model tests exercise them.
OUTSIDE_OPINFO = (
    "aten.div.Scalar_mode",
    "aten.true_divide.Tensor",
    # `5.5 % b` above; `300 % i` in test_elementwise.py.
    "aten.remainder.Scalar_Tensor",
)


def test_division_lowerings_build_for_every_opinfo_case():
    check_family("division", OUTSIDE_OPINFO)


def test_the_smallest_integer_divided_by_minus_one_wraps_as_in_eager(max_calls):
    # x86's integer division traps on MIN / -1: the whole process died of
    # SIGFPE where eager wraps (MIN // -1 is MIN, MIN % -1 is 0). Eager's own
    # int64 trunc division traps too, so that one is checked on int8 alone.
    def fn(a, b, s):
        return (
            a // b,
            torch.div(s, b.to(torch.int8), rounding_mode="trunc"),
            a % b,
            torch.fmod(a, b),
            s // b.to(torch.int8),
            torch.fmod(s, b.to(torch.int8)),
            a // -1,
            a % -1,
        )

    low = torch.iinfo(torch.int64).min
    a = torch.tensor([low, low, 7, -7, low + 1, 0], dtype=torch.int64)
    b = torch.tensor([-1, 3, -1, -2, -1, -1], dtype=torch.int64)
    s = torch.tensor([-128, -128, 127, 5, -127, 0], dtype=torch.int8)
    check_against_eager(fn, a, b, s, rtol=0, atol=0)
    assert max_calls.count == 1
