"""Random ops (rand, randn, dropout, ...): the family's build check, and the
distributions of rand_like and randn_like.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

import torch

from torch_max_backend import max_backend

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten.native_dropout.default",
    "aten.rand_like.default",
    "aten.randn.default",
    "aten.randperm.default",
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
