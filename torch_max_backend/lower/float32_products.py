"""float32 matrix products on a GPU, as accurate as torch's by default.

MAX's GPU matmul runs float32 operands through TF32 tensor cores: 11
significant bits per operand instead of 24, about 3e-4 of the result's scale
off (measured on an H200: [64, K] x [K, 64] products, K = 8 and 512, against
float64). torch computes float32 products in float32 unless the user allows
TF32 with ``torch.set_float32_matmul_precision("high")`` (or "medium"), or
``torch.backends.cuda.matmul.allow_tf32 = True``; so do we.

Under "highest" each operand is split into three float32 parts of at most 8
significant bits each (rounding to bfloat16 twice; the parts' scales fall by
2^-9 or more), which TF32 holds exactly: a product of two parts is then
exact, and the six largest of the nine products sum to the float32 product
within float32's own rounding; the three dropped are below 2^-25 of its
scale. It costs six matmuls where "high" runs one.

Every float32 product on a GPU is split, batched ones too, though a batched
one may not need it: attention's [2, 4, 33, 16] products gave float32-exact
results on the H200 (their forward and backward within torch's float32
tolerances of eager). Measuring which of MAX's GPU kernels read TF32 would
let those keep one matmul.
"""

from __future__ import annotations

import torch
from max.dtype import DType
from max.graph import TensorValue, ops


def tf32_allowed() -> bool:
    """Whether the user lets float32 products run in TF32 (torch's setting)."""
    return torch.get_float32_matmul_precision() != "highest"


def needs_split(a: TensorValue) -> bool:
    """Whether a matmul of ``a`` must be split to keep float32 accuracy."""
    return a.dtype == DType.float32 and not a.device.is_cpu() and not tf32_allowed()


def tf32_exact_parts(x: TensorValue) -> tuple[TensorValue, TensorValue, TensorValue]:
    """``x`` (float32) as three parts that sum to it exactly, each of at most
    8 significant bits (9 for the last), the largest first."""

    def rounded(v: TensorValue) -> TensorValue:
        return ops.cast(ops.cast(v, DType.bfloat16), DType.float32)

    zero = ops.constant(0.0, DType.float32, device=x.device)
    high = rounded(x)
    # inf - inf would make the smaller parts NaN, and the product NaN where
    # torch's is infinite: an infinite entry is all in its leading part.
    rest = ops.where(ops.is_inf(x), zero, ops.sub(x, high))
    middle = rounded(rest)
    return high, middle, ops.sub(rest, middle)


def split_matmul(a: TensorValue, b: TensorValue) -> TensorValue:
    """``a @ b`` from the six products of their TF32-exact parts that matter,
    the smallest summed first."""
    a0, a1, a2 = tf32_exact_parts(a)
    b0, b1, b2 = tf32_exact_parts(b)
    # Infinities enter through the leading product alone: inf times a zero
    # smaller part of the other operand would be NaN where torch's is inf.
    a0f, b0f = _finite(a0), _finite(b0)
    small = ops.add(
        ops.add(ops.matmul(a0f, b2), ops.matmul(a2, b0f)), ops.matmul(a1, b1)
    )
    middle = ops.add(ops.matmul(a0f, b1), ops.matmul(a1, b0f))
    return ops.add(ops.add(small, middle), ops.matmul(a0, b0))


def _finite(x: TensorValue) -> TensorValue:
    zero = ops.constant(0.0, DType.float32, device=x.device)
    return ops.where(ops.is_inf(x), zero, x)


def matmul(a: TensorValue, b: TensorValue) -> TensorValue:
    """ops.matmul, split into TF32-exact parts where float32 accuracy asks it."""
    if needs_split(a):
        return split_matmul(a, b)
    return ops.matmul(a, b)
