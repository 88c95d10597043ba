"""Histograms: histc, as mixture-of-experts routers count tokens per expert.

torch's histc places a value x of [lo, hi] in bin
``int((x - lo) * bins / (hi - lo))`` computed in the input's dtype, the
value ``hi`` itself in the last bin, and counts nothing outside the range
(NaN included). With ``min == max`` the range is the input's own
(``aminmax``), widened by one on each side when that is a single value.
Here each value's bin is compared with every bin's position and the matches
summed: bins x values comparisons, which suits the few bins of a router.
"""

from __future__ import annotations

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from ..checks import fail_when
from ..kit import node_arg, tensor_meta
from ..registry import lowering
from ..scalars import as_tensor
from ..shapes import counting
from .reduction import torch_max, torch_min

aten = torch.ops.aten


def _histc_covered(node: torch.fx.Node) -> str | None:
    """float32 or float64 input, static bins > 0, numbers min <= max, and a
    non-empty input when the range is the input's own."""
    meta = tensor_meta(node.args[0])
    if meta is None or meta.dtype not in (torch.float32, torch.float64):
        return "an input that is not float32 or float64"
    bins = node_arg(node, 1, "bins", 100)
    low, high = node_arg(node, 2, "min", 0), node_arg(node, 3, "max", 0)
    if not isinstance(bins, int) or bins <= 0:
        return f"bins={bins} (eager refuses it)"
    if not all(isinstance(v, (int, float)) for v in (low, high)):
        return "a range that is not two numbers"
    if low > high or not all(abs(float(v)) < float("inf") for v in (low, high)):
        return f"the range [{low}, {high}] (eager refuses it)"
    if low == high and (meta.numel() == 0 or not isinstance(meta.numel(), int)):
        return "the range of an empty or dynamically sized input"
    return None


@lowering(aten.histc.default, lift_scalars=False, supports=_histc_covered)
def histc(
    self: TensorValue, bins: int = 100, min: float = 0, max: float = 0
) -> TensorValue:
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor"""
    dtype = self.dtype
    values = ops.reshape(self, [-1])
    if min == max:
        low = ops.reshape(torch_min(values, 0), [1])
        high = ops.reshape(torch_max(values, 0), [1])
        # A NaN or an infinity among the values: eager raises.
        bad = [
            check(bound) for bound in (low, high) for check in (ops.is_nan, ops.is_inf)
        ]
        fail_when(
            ops.logical_or(
                ops.logical_or(bad[0], bad[1]), ops.logical_or(bad[2], bad[3])
            ),
            "RuntimeError",
            "torch.histc: range of the input is not finite",
        )
        one = as_tensor(1.0, dtype)
        single = ops.equal(low, high)
        low = ops.where(single, ops.sub(low, one), low)
        high = ops.where(single, ops.add(high, one), high)
        width = ops.sub(high, low)
    else:
        low, high = as_tensor(float(min), dtype), as_tensor(float(max), dtype)
        # In Python, in the input's dtype as eager: MAX would fold a
        # difference of two constants by compiling a kernel for it.
        exact = np.float32 if dtype == DType.float32 else np.float64
        width = as_tensor(float(exact(max) - exact(min)), dtype)
    inside = ops.logical_and(
        ops.greater_equal(values, low), ops.greater_equal(high, values)
    )
    scaled = ops.div(
        ops.mul(ops.sub(values, low), as_tensor(float(bins), dtype)), width
    )
    # Truncated as eager's int cast; out-of-range values are not counted.
    safe = ops.where(inside, scaled, as_tensor(0.0, dtype))
    slot = ops.cast(ops.floor(safe), DType.int64)
    last = as_tensor(bins - 1, DType.int64)
    slot = ops.where(ops.greater(slot, last), last, slot)
    bin_ids = ops.reshape(counting(bins, values.device), [1, bins])
    hits = ops.logical_and(
        ops.equal(ops.reshape(slot, [-1, 1]), bin_ids), ops.reshape(inside, [-1, 1])
    )
    counts = ops.sum(ops.cast(hits, dtype), axis=0)
    return ops.reshape(counts, [bins])
