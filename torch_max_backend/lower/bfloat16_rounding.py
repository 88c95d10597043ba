"""float32 values rounded to bfloat16 on the CPU by a kernel of ours.

torch rounds a bfloat16 tensor's every elementwise result from float32
(``opmath``), so a bfloat16 model rounds after nearly every op. MAX 26.7's
CPU cast to bfloat16 converts about 0.9 values a nanosecond (a 512x1536
product of two tensors then rounded: 1.1 ms, the product alone 0.2, an
AVX-512 Xeon), where our kernel (kernels/mojo_rounding) rounds the same
values in 0.1 ms with the same bits as torch's. The kernel's input is
materialized in float32 (MAX fuses no elementwise work into a kernel of
ours); small results keep MAX's cast, fused into the op before it. GPUs
keep MAX's cast.
"""

from __future__ import annotations

from max.dtype import DType
from max.graph import TensorType, TensorValue, ops

from ..kernels.library import ROUNDING, custom
from .shapes import static_size

# Values below which MAX's cast stays. Timed from 16384 up, where the
# kernel led (8 roundings: 150 us against 365); below that untimed, so
# small graphs (a decode step's rows) keep their fused casts rather than
# add a kernel call each.
ROUNDED_BY_KERNEL_FROM = 16384


def _known_values(x: TensorValue) -> int:
    """The product of ``x``'s static dims (a symbolic dim counts as 1)."""
    total = 1
    for dim in x.shape:
        size = static_size(dim)
        total *= 1 if size is None else size
    return total


def cast_to(x: TensorValue, dtype: DType) -> TensorValue:
    """``x`` cast to ``dtype``; float32 to bfloat16 on the CPU by our kernel
    where the values are many."""
    if (
        dtype != DType.bfloat16
        or x.dtype != DType.float32
        or not x.device.is_cpu()
        or _known_values(x) < ROUNDED_BY_KERNEL_FROM
    ):
        return ops.cast(x, dtype)
    (out,) = custom(
        ROUNDING,
        "torch_max_backend_round_bfloat16",
        [x],
        [TensorType(DType.bfloat16, x.shape, x.device)],
        x.device,
    )
    return out
