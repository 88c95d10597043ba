"""Pooling: max, average and adaptive average pooling over 1, 2 and 3 spatial dims.

Plain 2-d pooling (floor mode, max-pool indices unused, average divisors of
the whole kernel) runs on MAX's NHWC pooling kernels, with NaNs put back into
max pooling, which MAX's kernel skips. Everything else is built from window
tables computed here, with torch's formulas, from the static spatial sizes:

* Max pooling gathers each window's elements through a ``[kernel, outputs]``
  table of flat input positions (-1 in the padding) and reduces over the kernel
  axis. The indices come from the same table, so they are torch's exactly:
  the first maximum in window order, or the last NaN.
* Average pooling is separable: a window sum is a product with one 0/1 matrix
  per spatial dim, and torch's divisor is a product of per-dim counts (or the
  override). The backward (``pooling_backward``) uses the transposed matrices.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from max.dtype import DType
from max.graph import Dim, TensorValue, ops

from ..context import current
from ..dtypes import to_torch_dtype
from ..registry import SupportsFn, lowering
from ..shapes import static_size

aten = torch.ops.aten


# -- arguments and capability checks ---------------------------------------------


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


def node_arg(node: torch.fx.Node, index: int, name: str, default: Any) -> Any:
    """Argument ``index``/``name`` of an FX node, positional or keyword."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _tensor_meta(value: object) -> torch.Tensor | None:
    meta = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    if isinstance(meta, (list, tuple)):
        meta = meta[0]
    return meta if isinstance(meta, torch.Tensor) else None


def static_sizes(node: torch.fx.Node) -> str | None:
    """Static sizes.

    The window tables need the static sizes of the node's tensors (only the
    spatial ones set the tables, but reshapes over symbolic batch sizes are
    left unexercised).
    """
    metas = [_tensor_meta(a) for a in node.args if isinstance(a, torch.fx.Node)]
    metas.append(_tensor_meta(node))
    for meta in metas:
        if meta is not None and not all(isinstance(s, int) for s in meta.shape):
            return "pooling with symbolic sizes"
    return None


def floating_input(node: torch.fx.Node) -> str | None:
    """Floating-point inputs."""
    meta = _tensor_meta(node.args[0])
    if meta is not None and not meta.dtype.is_floating_point:
        # torch averages integers with truncating integer division.
        return f"average pooling of {meta.dtype} tensors"
    return None


def all_of(*checks: SupportsFn) -> SupportsFn:
    """A check passing where each of ``checks`` passes; documented as all of theirs."""

    def check(node: torch.fx.Node) -> str | None:
        for c in checks:
            reason = c(node)
            if reason is not None:
                return reason
        return None

    summaries = [(c.__doc__ or "").strip().split("\n\n")[0].rstrip(".") for c in checks]
    check.__doc__ = "; ".join(s[:1].lower() + s[1:] for s in summaries if s) + "."
    return check


def _indices_used(node: torch.fx.Node) -> bool:
    return any(
        user.target is not operator.getitem or user.args[1] != 0 for user in node.users
    )


def out_spatial(n: int) -> list[int]:
    """The static spatial sizes of the current node's (first) result."""
    meta = _tensor_meta(current().node)
    assert meta is not None
    return [int(s) for s in meta.shape[-n:]]


def spatial(x: TensorValue, n: int) -> list[int]:
    sizes = [static_size(d) for d in list(x.shape)[-n:]]
    assert all(s is not None for s in sizes)  # guaranteed by static_sizes
    return [int(s) for s in sizes if s is not None]


def constant(values: np.ndarray, dtype: DType) -> TensorValue:
    return ops.constant(values, dtype, device=current().device)


# -- MAX's NHWC kernels ------------------------------------------------------------


def _batched(x: TensorValue) -> tuple[TensorValue, bool]:
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


def _lowest(dtype: DType) -> float | int:
    torch_dtype = to_torch_dtype(dtype)
    if torch_dtype.is_floating_point:
        return -math.inf
    return int(torch.iinfo(torch_dtype).min)


def _nan(dtype: DType) -> TensorValue:
    return ops.constant(math.nan, dtype, current().device)


def max_pool_nd(
    x: TensorValue,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> tuple[TensorValue, TensorValue]:
    """torch's max pooling over the last ``len(kernel)`` dims: values, indices."""
    n = len(kernel)
    in_sizes, out_sizes = spatial(x, n), out_spatial(n)
    table = max_pool_table(in_sizes, out_sizes, kernel, stride, padding, dilation)
    lead: list[Dim] = list(x.shape)[:-n]
    total = math.prod(in_sizes)
    flat = ops.reshape(x, [*lead, total])
    # [*lead, kernel, outputs]; padding slots read position 0, masked below.
    windows = ops.gather(flat, constant(np.maximum(table, 0), DType.int64), len(lead))
    positions = constant(table, DType.int64)
    valid = ops.greater_equal(positions, constant(np.array(0, np.int64), DType.int64))
    lowest = ops.constant(_lowest(x.dtype), x.dtype, current().device)
    masked = ops.where(valid, windows, lowest)
    best = ops.max(masked, axis=-2)
    is_best = ops.logical_and(valid, ops.equal(masked, best))
    beyond = constant(np.array(total, np.int64), DType.int64)
    index = ops.min(ops.where(is_best, positions, beyond), axis=-2)
    # MAX's max reduction starts from the lowest finite value, so a window of
    # -inf reduces to that and matches no element: it is -inf, and torch's
    # index is then the window's first position.
    unmatched = ops.equal(index, beyond)
    first = np.where(table >= 0, table, total).min(axis=0)
    best = ops.where(unmatched, lowest, best)
    index = ops.where(unmatched, constant(first, DType.int64), index)
    if x.dtype.is_float():
        # The reduction also skips NaNs, but torch's kernel takes a NaN
        # whatever it follows: the window is NaN, at its last NaN.
        nan = ops.logical_and(valid, ops.is_nan(windows))
        none = constant(np.array(-1, np.int64), DType.int64)
        last_nan = ops.max(ops.where(nan, positions, none), axis=-2)
        has_nan = ops.greater_equal(
            last_nan, constant(np.array(0, np.int64), DType.int64)
        )
        index = ops.where(has_nan, last_nan, index)
        best = ops.where(has_nan, _nan(x.dtype), best)
    out_shape = [*lead, *out_sizes]
    return ops.reshape(best, out_shape), ops.reshape(index, out_shape)


def _max_pool_supported(n: int) -> SupportsFn:
    def check(node: torch.fx.Node) -> str | None:
        """Non-bool inputs; static sizes for ceil mode, used indices or 3-d windows."""
        meta = _tensor_meta(node.args[0])
        if meta is not None and meta.dtype == torch.bool:
            return "max pooling of bool tensors"
        ceil_mode = node_arg(node, 5, "ceil_mode", False)
        if n == 2 and not ceil_mode and not _indices_used(node):
            return None  # MAX's kernel takes symbolic sizes too
        return static_sizes(node)

    return check


@lowering(aten.max_pool2d_with_indices.default, supports=_max_pool_supported(2))
def max_pool2d_with_indices(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[TensorValue, TensorValue]:
    """max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""
    kernel = expand(kernel_size, 2, kernel_size)
    strides = expand(stride, 2, kernel)
    pads = expand(padding, 2, (0,))
    dilations = expand(dilation, 2, (1,))
    # MAX's kernel is faster but has no indices, and its ceil mode is not
    # checked against torch's rule: only floor-mode values go there.
    if ceil_mode or _indices_used(current().node):
        return max_pool_nd(self, kernel, strides, pads, dilations)
    x, unbatched = _batched(self)

    def pool(t: TensorValue) -> TensorValue:
        return ops.max_pool2d(
            t,
            (kernel[0], kernel[1]),
            stride=(strides[0], strides[1]),
            dilation=(dilations[0], dilations[1]),
            padding=(pads[0], pads[1]),
        )

    twins = current().twins  # channels-last values kept between ops
    nhwc = twins.channels_last(x)
    out = pool(nhwc)
    if x.dtype.is_float():
        # MAX's kernel skips NaNs; torch's window is NaN if it holds one.
        has_nan = pool(ops.cast(ops.is_nan(nhwc), x.dtype))
        zero = ops.constant(0, x.dtype, current().device)
        out = ops.where(ops.greater(has_nan, zero), _nan(x.dtype), out)
    out = twins.channels_first(out)
    if unbatched:
        out = ops.squeeze(out, 0)
    # Nothing reads the indices (checked above), so no value stands for them.
    return out, out


@lowering(aten.max_pool3d_with_indices.default, supports=_max_pool_supported(3))
def max_pool3d_with_indices(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[TensorValue, TensorValue]:
    """max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"""
    # ceil_mode only changes the output sizes, read from the node's meta.
    kernel = expand(kernel_size, 3, kernel_size)
    return max_pool_nd(
        self,
        kernel,
        expand(stride, 3, kernel),
        expand(padding, 3, (0,)),
        expand(dilation, 3, (1,)),
    )


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
    product = ops.matmul(ops.reshape(moved, [-1, rows]), weights)
    y = ops.reshape(product, [*outer, cols])
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


def avg_pool_nd(
    x: TensorValue,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    count_include_pad: bool,
    divisor_override: int | None,
    out_sizes: Sequence[int],
) -> TensorValue:
    n = len(kernel)
    windows = [
        avg_windows(i, o, k, s, p, count_include_pad)
        for i, o, k, s, p in zip(
            spatial(x, n), out_sizes, kernel, stride, padding, strict=True
        )
    ]
    members = [m for m, _ in windows]
    return separable_average(
        x, members, divisor_table([c for _, c in windows], divisor_override)
    )


def adaptive_avg_pool_nd(x: TensorValue, out_sizes: Sequence[int]) -> TensorValue:
    n = len(out_sizes)
    windows = [
        adaptive_windows(i, o) for i, o in zip(spatial(x, n), out_sizes, strict=True)
    ]
    return separable_average(
        x, [m for m, _ in windows], divisor_table([c for _, c in windows], None)
    )


def _native_avg_pool2d(
    padding: Sequence[int] | int,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> bool:
    """Whether MAX's kernel computes torch's result. Without ``count_boundary``
    its divisors next to the padding are wrong for most strides (MAX 26.7), and
    its ceil mode is not checked against torch's rule: only floor-mode pooling
    dividing by the whole kernel (padding counted, or no padding) goes there."""
    padded = any(p != 0 for p in expand(padding, 2, (0,)))
    return (
        not ceil_mode and divisor_override is None and (count_include_pad or not padded)
    )


def _avg_pool2d_supported(node: torch.fx.Node) -> str | None:
    """Floating-point inputs (torch truncates integer averages); static sizes where MAX's kernel does not match torch's padding or ceil mode."""
    reason = floating_input(node)
    if reason is not None:
        return reason
    native = _native_avg_pool2d(
        node_arg(node, 3, "padding", (0,)),
        bool(node_arg(node, 4, "ceil_mode", False)),
        bool(node_arg(node, 5, "count_include_pad", True)),
        node_arg(node, 6, "divisor_override", None),
    )
    return None if native else static_sizes(node)


@lowering(aten.avg_pool2d.default, supports=_avg_pool2d_supported)
def avg_pool2d(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> TensorValue:
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    kernel = expand(kernel_size, 2, kernel_size)
    strides = expand(stride, 2, kernel)
    pads = expand(padding, 2, (0,))
    if not _native_avg_pool2d(pads, ceil_mode, count_include_pad, divisor_override):
        return avg_pool_nd(
            self,
            kernel,
            strides,
            pads,
            count_include_pad,
            divisor_override,
            out_spatial(2),
        )
    x, unbatched = _batched(self)
    twins = current().twins  # channels-last values kept between ops
    out = twins.channels_first(
        ops.avg_pool2d(
            twins.channels_last(x),
            (kernel[0], kernel[1]),
            stride=(strides[0], strides[1]),
            padding=(pads[0], pads[1]),
            # Equal to count_include_pad here, and the setting MAX gets right.
            count_boundary=True,
        )
    )
    return ops.squeeze(out, 0) if unbatched else out


_avg_pool_supported = all_of(floating_input, static_sizes)


@lowering(aten.avg_pool1d.default, supports=_avg_pool_supported)
def avg_pool1d(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> TensorValue:
    """avg_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=[0], bool ceil_mode=False, bool count_include_pad=True) -> Tensor"""
    # ceil_mode only changes the output size, read from the node's meta.
    kernel = expand(kernel_size, 1, kernel_size)
    return avg_pool_nd(
        self,
        kernel,
        expand(stride, 1, kernel),
        expand(padding, 1, (0,)),
        count_include_pad,
        None,
        out_spatial(1),
    )


@lowering(aten.avg_pool3d.default, supports=_avg_pool_supported)
def avg_pool3d(
    self: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> TensorValue:
    """avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"""
    kernel = expand(kernel_size, 3, kernel_size)
    return avg_pool_nd(
        self,
        kernel,
        expand(stride, 3, kernel),
        expand(padding, 3, (0,)),
        count_include_pad,
        divisor_override,
        out_spatial(3),
    )


@lowering(aten.adaptive_avg_pool1d.default, supports=_avg_pool_supported)
def adaptive_avg_pool1d(self: TensorValue, output_size: Sequence[int]) -> TensorValue:
    """adaptive_avg_pool1d(Tensor self, int[1] output_size) -> Tensor"""
    return adaptive_avg_pool_nd(self, out_spatial(1))


@lowering(aten._adaptive_avg_pool2d.default, supports=_avg_pool_supported)
def adaptive_avg_pool2d(self: TensorValue, output_size: Sequence[int]) -> TensorValue:
    """_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor"""
    (h, w), (out_h, out_w) = spatial(self, 2), out_spatial(2)
    if h % out_h == 0 and w % out_w == 0:
        # Equal disjoint windows: MAX's pooling kernel is exact and faster.
        kernel = [h // out_h, w // out_w]
        return avg_pool2d(self, kernel, kernel)
    return adaptive_avg_pool_nd(self, [out_h, out_w])


@lowering(aten._adaptive_avg_pool3d.default, supports=_avg_pool_supported)
def adaptive_avg_pool3d(self: TensorValue, output_size: Sequence[int]) -> TensorValue:
    """_adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor"""
    return adaptive_avg_pool_nd(self, out_spatial(3))
