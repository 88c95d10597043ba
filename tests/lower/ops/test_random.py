"""Random ops (rand, randn, dropout, ...): the family's build check, and the
distributions of rand_like and randn_like.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from torch_max_backend import FallbackWarning, max_backend

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten.bernoulli.p",
    "aten.exponential.default",
    "aten.native_dropout.default",
    "aten.normal.Tensor_Tensor",
    "aten.normal.Tensor_float",
    "aten.normal.float_Tensor",
    "aten.normal_functional.default",
    "aten.rand_like.default",
    "aten.randn.default",
    "aten.randperm.default",
    "aten.uniform.default",
)


def test_random_lowerings_build_for_every_opinfo_case():
    check_family("random", OUTSIDE_OPINFO)


def test_rand_like_and_randn_like_draw_from_their_distributions(max_calls):
    # The noise of diffusion and VAE sampling: shaped and typed like the
    # input, fresh at every call, reproducible under torch.manual_seed.
    def fn(x):
        return torch.rand_like(x), torch.randn_like(x, dtype=torch.float64)

    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
    x = torch.zeros(200, 100)
    torch.manual_seed(1)
    uniform, normal = compiled(x)
    assert uniform.shape == normal.shape == x.shape
    assert uniform.dtype == torch.float32 and normal.dtype == torch.float64
    assert uniform.min() >= 0 and uniform.max() < 1
    assert abs(uniform.mean() - 0.5) < 0.01 and abs(uniform.var() - 1 / 12) < 0.005
    assert abs(normal.mean()) < 0.03 and abs(normal.std() - 1) < 0.03
    again, _ = compiled(x)
    assert not torch.equal(again, uniform)
    torch.manual_seed(1)
    torch.testing.assert_close(compiled(x)[0], uniform)
    assert max_calls.count == 3


def _draws(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # What models draw into tensors of their own: HuBERT's and wav2vec2's
    # layer drop (uniform_), weight initialisations (normal_, uniform_),
    # stochastic depth (bernoulli_), and torch.normal's three forms.
    shape = x.shape
    return (
        torch.empty(shape).uniform_(-2, 3),
        torch.empty(shape, dtype=torch.float16).normal_(1, 2),
        torch.empty(shape).bernoulli_(0.3),
        torch.empty(shape, dtype=torch.float64).exponential_(4.0),
        torch.normal(x, 2.0),
        torch.normal(1.0, x + 0.5),
        torch.normal(x, x + 0.5),
    )


def test_draws_into_a_model_s_own_tensors_follow_their_distributions(max_calls):
    compiled = torch.compile(_draws, backend=max_backend, options={"strict": True})
    x = torch.zeros(200, 100)
    torch.manual_seed(3)
    got = compiled(x)
    want = _draws(x)
    assert [(g.shape, g.dtype) for g in got] == [(w.shape, w.dtype) for w in want]
    uniform, normal, coin, wait, around_x, scaled, both = (g.double() for g in got)
    assert uniform.min() >= -2 and uniform.max() < 3
    assert abs(uniform.mean() - 0.5) < 0.05 and abs(uniform.var() - 25 / 12) < 0.1
    assert abs(normal.mean() - 1) < 0.05 and abs(normal.std() - 2) < 0.05
    assert set(coin.unique().tolist()) == {0.0, 1.0} and abs(coin.mean() - 0.3) < 0.02
    assert wait.min() >= 0 and abs(wait.mean() - 0.25) < 0.01
    assert abs(wait.std() - 0.25) < 0.015
    assert abs(around_x.mean()) < 0.05 and abs(around_x.std() - 2) < 0.05
    assert abs(scaled.mean() - 1) < 0.02 and abs(scaled.std() - 0.5) < 0.02
    assert abs(both.mean()) < 0.02 and abs(both.std() - 0.5) < 0.02
    # Fresh at every call, reproducible under torch.manual_seed.
    again = compiled(x)
    assert not any(torch.equal(a, g) for a, g in zip(again, got, strict=True))
    torch.manual_seed(3)
    for repeated, first in zip(compiled(x), got, strict=True):
        torch.testing.assert_close(repeated, first)
    assert max_calls.count == 3


def test_a_negative_std_raises_eager_s_error_after_the_call():
    compiled = torch.compile(
        lambda std: torch.normal(0.0, std),
        backend=max_backend,
        options={"strict": True},
    )
    torch.testing.assert_close(compiled(torch.zeros(4)), torch.zeros(4))
    with pytest.raises(RuntimeError, match="normal expects all elements of std >= 0"):
        compiled(torch.tensor([1.0, -1.0, 1.0, 1.0]))


@pytest.mark.parametrize(
    ("draw", "error"),
    [
        # Left to PyTorch (a FallbackWarning), which raises at the call.
        (lambda x: torch.empty(3).uniform_(3, 2), "uniform_ expects"),
        # Refused by torch's own check while Dynamo traces.
        (lambda x: torch.normal(x, -2.0), "normal expects std >= 0.0"),
    ],
)
def test_an_argument_eager_refuses_raises_eager_s_error(draw, error):
    compiled = torch.compile(lambda x: draw(x) + x, backend=max_backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        with pytest.raises(RuntimeError, match=error):
            compiled(torch.zeros(3))
