"""Window tables for pooling and its backward, computed with torch's formulas.

Max pooling gathers each window's elements through a ``[kernel, outputs]``
table of flat input positions (-1 in the padding) and reduces over the kernel
axis; the indices come from the same table, so they are torch's exactly.
Average pooling is separable: a window sum is a product with one 0/1 matrix
per spatial dim, and torch's divisor is a product of per-dim counts (or the
override); the backward uses the transposed matrices. The tables need static
spatial sizes, which the capability checks here require.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np
import torch
from max.dtype import DType
from max.graph import TensorValue, ops

from .context import current
from .kit import arg_meta, fake_tensor, has_symbolic_sizes
from .products import product
from .shapes import static_size

# -- capability checks and sizes ---------------------------------------------


def expand(values: Sequence[int] | int, n: int, default: Sequence[int]) -> list[int]:
    """A pooling parameter as ``n`` ints: torch allows one value for every dim,
    and an empty list (stride) for the default."""
    if isinstance(values, int):
        return [values] * n
    if len(values) == 0:
        values = default
    if len(values) == 1:
        return [values[0]] * n
    return list(values)


def window_parameters(
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> dict[str, int]:
    """A 2-d window's sizes as the window kernels' compile-time parameters
    (im2col, col2im, max pooling with indices)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    return {
        "kh": kh,
        "kw": kw,
        "sh": sh,
        "sw": sw,
        "ph": ph,
        "pw": pw,
        "dh": dh,
        "dw": dw,
    }


def static_sizes(node: torch.fx.Node) -> str | None:
    """Static sizes.

    The window tables need the static sizes of the node's tensors (only the
    spatial ones set the tables, but reshapes over symbolic batch sizes are
    left unexercised).
    """
    return "pooling with symbolic sizes" if has_symbolic_sizes(node) else None


def floating_input(node: torch.fx.Node) -> str | None:
    """Floating-point inputs."""
    meta = arg_meta(node, 0)
    if meta is not None and not meta.dtype.is_floating_point:
        # torch averages integers with truncating integer division.
        return f"average pooling of {meta.dtype} tensors"
    return None


def indices_used(node: torch.fx.Node) -> bool:
    return any(
        user.target is not operator.getitem or user.args[1] != 0 for user in node.users
    )


def out_spatial(n: int) -> list[int]:
    """The static spatial sizes of the current node's (first) result."""
    meta = fake_tensor(current().node)
    return [int(s) for s in meta.shape[-n:]]


def spatial(x: TensorValue, n: int) -> list[int]:
    sizes = [static_size(d) for d in list(x.shape)[-n:]]
    assert all(s is not None for s in sizes)  # guaranteed by static_sizes
    return [int(s) for s in sizes if s is not None]


def constant(values: np.ndarray, dtype: DType) -> TensorValue:
    return ops.constant(values, dtype, device=current().device)


# -- MAX's NHWC kernels ------------------------------------------------------------


def batched(x: TensorValue) -> tuple[TensorValue, bool]:
    # torch also pools unbatched CHW tensors.
    return (ops.unsqueeze(x, 0), True) if x.rank == 3 else (x, False)


# -- max pooling by gathering windows ----------------------------------------------


def max_pool_table(
    in_sizes: Sequence[int],
    out_sizes: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> np.ndarray:
    """``[prod(kernel), prod(out_sizes)]`` flat input positions, -1 in the padding.

    Rows follow torch's window order (row-major over the kernel offsets). Along
    a row the valid positions increase, so torch's first maximum is the least
    candidate position and its last NaN the greatest.
    """
    n = len(in_sizes)
    flat = np.zeros([1] * (2 * n), dtype=np.int64)
    valid = np.ones([1] * (2 * n), dtype=bool)
    for d in range(n):
        starts = np.arange(out_sizes[d], dtype=np.int64) * stride[d] - padding[d]
        offsets = np.arange(kernel[d], dtype=np.int64) * dilation[d]
        pos = offsets[:, None] + starts[None, :]  # [kernel_d, out_d]
        shape = [1] * (2 * n)
        shape[d], shape[n + d] = kernel[d], out_sizes[d]
        pos = pos.reshape(shape)
        flat = flat * in_sizes[d] + pos
        valid = valid & (pos >= 0) & (pos < in_sizes[d])
    table = np.where(valid, flat, -1)
    return table.reshape(math.prod(kernel), math.prod(out_sizes))


def adaptive_max_table(in_sizes: Sequence[int], out_sizes: Sequence[int]) -> np.ndarray:
    """``max_pool_table`` for adaptive windows: along each dim, output i reads
    floor(i * in / out) up to ceil((i + 1) * in / out), so windows differ in
    length; the slots past a shorter window are -1, as padding is."""
    n = len(in_sizes)
    flat = np.zeros([1] * (2 * n), dtype=np.int64)
    valid = np.ones([1] * (2 * n), dtype=bool)
    widths = []
    for d in range(n):
        o = np.arange(out_sizes[d], dtype=np.int64)
        low = (o * in_sizes[d]) // out_sizes[d]
        high = -((-(o + 1) * in_sizes[d]) // out_sizes[d])
        width = int((high - low).max())
        pos = np.arange(width, dtype=np.int64)[:, None] + low[None, :]
        shape = [1] * (2 * n)
        shape[d], shape[n + d] = width, out_sizes[d]
        flat = flat * in_sizes[d] + pos.reshape(shape)
        valid = valid & (pos < high[None, :]).reshape(shape)
        widths.append(width)
    table = np.where(valid, flat, -1)
    return table.reshape(math.prod(widths), math.prod(out_sizes))


# -- average pooling as separable matrix products --------------------------------


def compute_in(x: TensorValue) -> tuple[TensorValue, np.dtype]:
    """``x`` in the float precision torch accumulates in, and its numpy dtype."""
    if x.dtype == DType.float64:
        return x, np.dtype(np.float64)
    if x.dtype == DType.float32:
        return x, np.dtype(np.float32)
    # float32 for float32 and, as torch's opmath, for float16/bfloat16.
    return ops.cast(x, DType.float32), np.dtype(np.float32)


def avg_windows(
    in_size: int,
    out_size: int,
    kernel: int,
    stride: int,
    padding: int,
    count_include_pad: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """One dim of torch's average pooling: 0/1 membership ``[in, out]`` and the
    per-output count whose product over the dims is torch's divisor."""
    start = np.arange(out_size, dtype=np.int64) * stride - padding
    end = np.minimum(start + kernel, in_size + padding)
    low, high = np.maximum(start, 0), np.minimum(end, in_size)
    pos = np.arange(in_size, dtype=np.int64)[:, None]
    member = (pos >= low) & (pos < high)
    count = end - start if count_include_pad else high - low
    return member, count


def adaptive_windows(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """One dim of adaptive average pooling: windows floor(i*in/out) to
    ceil((i+1)*in/out), as membership ``[in, out]`` and counts."""
    o = np.arange(out_size, dtype=np.int64)
    low = (o * in_size) // out_size
    high = -((-(o + 1) * in_size) // out_size)
    pos = np.arange(in_size, dtype=np.int64)[:, None]
    return (pos >= low) & (pos < high), high - low


def divisor_table(counts: Sequence[np.ndarray], override: int | None) -> np.ndarray:
    """torch's divisor for every output position: the product of the counts."""
    if override is not None:
        return np.array(float(override))
    table = np.ones([1] * len(counts), dtype=np.float64)
    for d, count in enumerate(counts):
        shape = [1] * len(counts)
        shape[d] = len(count)
        table = table * count.reshape(shape)
    # A window wholly in the padding sums nothing: torch writes 0 there.
    return np.where(table > 0, table, 1.0)


def contract(
    x: TensorValue, axis: int, matrix: np.ndarray, dtype: np.dtype
) -> TensorValue:
    """``x`` with dim ``axis`` mapped through ``matrix`` (``[old, new]``)."""
    rows, cols = matrix.shape
    if rows == cols and np.array_equal(matrix, np.eye(rows, dtype=bool)):
        return x
    weights = constant(matrix.astype(dtype), x.dtype)
    last = x.rank - 1
    moved = x if axis == last else ops.transpose(x, axis, last)
    # A plain 2-d product: MAX failed to compile rank-5 by rank-2 matmuls.
    outer = list(moved.shape)[:-1]
    mapped = product(ops.reshape(moved, [-1, rows]), weights)
    y = ops.reshape(mapped, [*outer, cols])
    return y if axis == last else ops.transpose(y, axis, last)


def separable_average(
    x: TensorValue, members: Sequence[np.ndarray], divisor: np.ndarray
) -> TensorValue:
    """Window sums over the last dims by ``members``, divided by ``divisor``."""
    out_dtype = x.dtype
    y, dtype = compute_in(x)
    first = y.rank - len(members)
    for d, member in enumerate(members):
        y = contract(y, first + d, member, dtype)
    y = ops.div(y, constant(divisor.astype(dtype), y.dtype))
    return ops.cast(y, out_dtype) if y.dtype != out_dtype else y
