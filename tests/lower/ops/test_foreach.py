"""_foreach_* ops over tensor lists (optimizers): the family's build check.

Numerics are compared with eager PyTorch by the OpInfo sweep (tests/opinfo);
this module checks that every case reaching the family builds.
"""

from __future__ import annotations

from .family_check import check_family

# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten._foreach_abs.default",
    "aten._foreach_acos.default",
    "aten._foreach_add.List",
    "aten._foreach_add.Scalar",
    "aten._foreach_add.ScalarList",
    "aten._foreach_add.Tensor",
    "aten._foreach_addcdiv.Scalar",
    "aten._foreach_addcdiv.ScalarList",
    "aten._foreach_addcdiv.Tensor",
    "aten._foreach_addcmul.Scalar",
    "aten._foreach_addcmul.ScalarList",
    "aten._foreach_addcmul.Tensor",
    "aten._foreach_asin.default",
    "aten._foreach_atan.default",
    "aten._foreach_ceil.default",
    "aten._foreach_clamp_max.List",
    "aten._foreach_clamp_max.Scalar",
    "aten._foreach_clamp_max.ScalarList",
    "aten._foreach_clamp_min.List",
    "aten._foreach_clamp_min.Scalar",
    "aten._foreach_clamp_min.ScalarList",
    "aten._foreach_clone.default",
    "aten._foreach_copy.default",
    "aten._foreach_cos.default",
    "aten._foreach_cosh.default",
    "aten._foreach_div.List",
    "aten._foreach_div.Scalar",
    "aten._foreach_div.ScalarList",
    "aten._foreach_div.Tensor",
    "aten._foreach_erf.default",
    "aten._foreach_erfc.default",
    "aten._foreach_exp.default",
    "aten._foreach_expm1.default",
    "aten._foreach_floor.default",
    "aten._foreach_frac.default",
    "aten._foreach_lerp.List",
    "aten._foreach_lerp.Scalar",
    "aten._foreach_lerp.ScalarList",
    "aten._foreach_log.default",
    "aten._foreach_log10.default",
    "aten._foreach_log1p.default",
    "aten._foreach_log2.default",
    "aten._foreach_max.default",
    "aten._foreach_maximum.List",
    "aten._foreach_maximum.Scalar",
    "aten._foreach_maximum.ScalarList",
    "aten._foreach_minimum.List",
    "aten._foreach_minimum.Scalar",
    "aten._foreach_minimum.ScalarList",
    "aten._foreach_mm.default",
    "aten._foreach_mul.List",
    "aten._foreach_mul.Scalar",
    "aten._foreach_mul.ScalarList",
    "aten._foreach_mul.Tensor",
    "aten._foreach_neg.default",
    "aten._foreach_norm.Scalar",
    "aten._foreach_pow.List",
    "aten._foreach_pow.Scalar",
    "aten._foreach_pow.ScalarAndTensor",
    "aten._foreach_pow.ScalarList",
    "aten._foreach_powsum.Scalar",
    "aten._foreach_reciprocal.default",
    "aten._foreach_round.default",
    "aten._foreach_rsqrt.default",
    "aten._foreach_sigmoid.default",
    "aten._foreach_sign.default",
    "aten._foreach_sin.default",
    "aten._foreach_sinh.default",
    "aten._foreach_sqrt.default",
    "aten._foreach_sub.List",
    "aten._foreach_sub.Scalar",
    "aten._foreach_sub.ScalarList",
    "aten._foreach_tan.default",
    "aten._foreach_tanh.default",
    "aten._foreach_trunc.default",
    "aten._foreach_zero.default",
)


def test_foreach_lowerings_build_for_every_opinfo_case():
    check_family("foreach", OUTSIDE_OPINFO)
