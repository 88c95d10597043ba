"""NaNs and infinities go through every op as in eager: max, min, clamp,
rectifiers, exp and friends, softmax, attention, sorting, comparisons and
scatter reductions. MAX's kernels and simplifications drop or turn NaNs into
numbers in each of these; a NaN turned into a number would hide a diverging
model from a user's NaN check."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend

from .helpers import check_against_eager


def _with_nans() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    x[0, 1] = float("nan")
    x[1, 2] = float("inf")
    y[1, 1] = float("nan")
    return x, y


def test_nans_go_through_max_min_clamp_and_rectifiers(max_calls):
    def fn(x, y):
        return (
            torch.maximum(x, y),
            torch.minimum(x, y),
            torch.max(x, y),
            torch.clamp(x, -0.5, 0.5),
            torch.clamp_min(x, 0.0),
            torch.clamp_max(x, 0.0),
            torch.clamp(x, y - 1, y + 1),
            F.relu(x),
            F.relu6(x),
            F.hardtanh(x),
            F.hardsigmoid(x),
            F.elu(x),
        )

    check_against_eager(fn, *_with_nans())
    assert max_calls.count == 1


def _relu(x: torch.Tensor) -> torch.Tensor:
    return F.relu(x).sum()


def _elu_family(x: torch.Tensor) -> torch.Tensor:
    # torch's elu_backward takes the positive slope where ``x <= 0`` is false,
    # NaN included; the negative slope's exp(NaN) made that gradient inf.
    return (F.elu(x) + F.selu(x) + F.celu(x, alpha=0.5)).sum()


def _hardtanh_and_relu6(x: torch.Tensor) -> torch.Tensor:
    # torch zeroes the gradient where x <= min or x >= max, so a NaN passes
    # it; a test of min < x < max zeroed it.
    return (F.hardtanh(x) + F.relu6(x) * 2).sum()


def _smooth_l1_loss_and_softshrink(x: torch.Tensor) -> torch.Tensor:
    # torch's decompositions of their backward test ``|x| < beta`` (and take
    # sign(NaN) = 0), so a NaN input got a 0 gradient; eager's kernels test
    # x <= -beta and x >= beta, which a NaN fails, and pass it on.
    target = torch.linspace(-1.0, 1.0, 12).reshape(3, 4)
    weights = torch.arange(12.0).reshape(3, 4)
    return (
        F.smooth_l1_loss(x, target, beta=0.5)
        + F.smooth_l1_loss(x, target, beta=0.0, reduction="sum")
        + (F.smooth_l1_loss(x, target, reduction="none") * weights).sum()
        + F.softshrink(x, 0.5).sum()
    )


def _log_softmax_and_cross_entropy(x: torch.Tensor) -> torch.Tensor:
    # Its backward took MAX's exp, exp(NaN) = inf: the rows' gradients (a
    # cross-entropy's too) came out infinite where torch's are NaN.
    return F.log_softmax(x, 0).sum() + F.cross_entropy(x, torch.tensor([1, 3, 0]))


GRADIENTS_OF_NANS = [
    _relu,
    _elu_family,
    _hardtanh_and_relu6,
    _smooth_l1_loss_and_softshrink,
    _log_softmax_and_cross_entropy,
]


def test_rectifiers_losses_and_log_softmax_pass_the_gradient_of_a_nan_input(
    max_calls,
):
    # Each function's gradient at its own input holding a NaN and an inf,
    # against eager; all of them from one MAX forward and one MAX backward,
    # so that the suite compiles one training step for them, not five.
    def fn(*xs: torch.Tensor) -> torch.Tensor:
        return sum(f(x) for f, x in zip(GRADIENTS_OF_NANS, xs, strict=True))

    xs = [_with_nans()[0].requires_grad_() for _ in GRADIENTS_OF_NANS]
    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
    got = torch.autograd.grad(compiled(*xs), xs)
    want = torch.autograd.grad(fn(*xs), xs)
    for f, g, w in zip(GRADIENTS_OF_NANS, got, want, strict=True):
        torch.testing.assert_close(
            g, w, equal_nan=True, msg=lambda m, f=f: f"{f.__name__}: {m}"
        )
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1


def test_softmax_rows_holding_a_nan_or_infinity_are_nan_as_in_eager(max_calls):
    # MAX's softmax kernels gave such a row zeros with a NaN only where the
    # NaN or infinity was; torch's row is NaN throughout.
    def fn(x):
        return (
            torch.softmax(x, -1),
            torch.log_softmax(x, -1),
            torch.softmax(x, 0),
            torch.log_softmax(x, 0),
        )

    x = torch.randn(5, 6)
    x[0, 1] = float("nan")
    x[1, 2] = float("inf")
    x[2, 3] = float("-inf")
    x[3, :] = float("-inf")
    check_against_eager(fn, x)
    assert max_calls.count == 1


def test_exp_tanh_sigmoid_and_acos_keep_nans_as_in_eager(max_calls):
    # MAX gives exp(NaN) = inf, tanh(NaN) = 1, sigmoid(NaN) = 0 and
    # acos(NaN) = 0 (acos(inf) = 0, acos(-inf) = pi), where torch gives NaN:
    # a diverging model's NaNs would turn into numbers through a GELU's tanh
    # or a gate's sigmoid.
    def fn(x):
        return (
            torch.exp(x),
            torch.tanh(x),
            torch.sigmoid(x),
            torch.acos(x.clamp(-1, 1)),
            torch.acos(x),
            torch.expm1(x),
            torch.cosh(x),
            F.gelu(x, approximate="tanh"),
            F.silu(x),
            torch.logsumexp(x, -1),
        )

    x = torch.tensor([[float("nan"), 0.5, -0.25], [float("inf"), float("-inf"), 2.0]])
    check_against_eager(fn, x)
    assert max_calls.count == 1


def test_attention_with_a_nan_key_gives_nan_rows_as_in_eager(max_calls):
    # The log-sum-exp form (training graphs, grouped-query inference) took
    # MAX's exp, exp(NaN) = inf: rows reading a NaN key came out infinite
    # or finite where torch's are NaN.
    def fn(q, k, v, kg, vg):
        return (
            F.scaled_dot_product_attention(q, k, v),
            F.scaled_dot_product_attention(q, kg, vg, enable_gqa=True),
        )

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 3, 8) for _ in range(3))
    kg, vg = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    k[0, 1, 2, 5] = float("nan")
    kg[0, 0, 1, 0] = float("nan")
    q.requires_grad_()  # the training form, which keeps the log-sum-exp
    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
    outputs = compiled(q, k, v, kg, vg)
    for got, want in zip(outputs, fn(q, k, v, kg, vg), strict=True):
        torch.testing.assert_close(got, want, equal_nan=True)
    # The step's backward, compiled with its forward, runs too.
    sum(o.nan_to_num().sum() for o in outputs).backward()
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1


def test_sort_and_topk_order_nans_and_infinities_as_in_eager(max_calls):
    # torch orders NaN above +inf; MAX's top_k left a row holding a NaN
    # unsorted. Rows are sorted along both dims, in three float dtypes.
    def fn(x, d, h):
        outputs = []
        for t in (x, d, h):
            for dim in (-1, 0):
                outputs += [*torch.sort(t, dim), *torch.sort(t, dim, descending=True)]
            outputs += [*torch.topk(t, 3), *torch.topk(t, 2, largest=False)]
        return outputs

    nan, inf = float("nan"), float("inf")
    x = torch.tensor(
        [
            [3.0, nan, 1.0, -inf, 2.0, inf],
            [0.5, -2.0, inf, nan, -inf, 4.0],
            [nan, 7.0, -1.0, 6.0, 5.0, -3.0],
            [2.5, 1.5, -0.5, 9.0, 8.0, -7.0],
        ]
    )
    check_against_eager(fn, x, x.double(), x.bfloat16())
    assert max_calls.count == 1


def test_a_value_compared_with_or_subtracted_from_itself_keeps_its_nans(max_calls):
    # MAX simplifies x != x to false, x == x and x >= x to true and x - x to
    # 0, right only for finite x. x != x is the NaN test of torch's own
    # nanmean decomposition and of users' code; the detach makes no copy.
    def fn(x):
        return (
            x != x,
            x == x,
            x >= x,
            x <= x,
            x > x,
            x < x,
            x - x,
            x - x.detach(),
            torch.nanmean(x),
            torch.nanmean(x, 1),
        )

    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.5, nan, inf, -0.0], [-inf, 2.0, nan, 3.0]])
    check_against_eager(fn, x)
    assert max_calls.count == 1


def test_scatter_max_and_min_keep_reduced_nans_as_in_eager(max_calls):
    # MAX's scatter_max and scatter_min skip a NaN; torch's keep it.
    def fn(base, src, index):
        return (
            base.scatter_reduce(0, index, src, "amax"),
            base.scatter_reduce(0, index, src, "amin", include_self=False),
            base.scatter_reduce(0, index, src, "amax", include_self=False),
        )

    nan = float("nan")
    base = torch.tensor([0.0, nan, 0.0, 5.0])
    src = torch.tensor([1.0, 2.0, nan, -1.0, 3.0, -4.0])
    index = torch.tensor([0, 0, 1, 2, 2, 0])
    check_against_eager(fn, base, src, index)
    assert max_calls.count == 1
