"""Activations and softmax, with the backward ops that autograd leaves for them."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from max.graph import TensorValue, ops
from max.graph.ops.reduction import max as reduce_max

from ..opmath import opmath
from ..registry import lowering
from ..scalars import Operand, as_tensor, out_max_dtype
from ..shapes import normalize_dim
from .elementwise import (
    accurate_expm1,
    at_least,
    at_most,
    keep_nan,
    torch_exp,
    torch_sigmoid,
    torch_tanh,
)

aten = torch.ops.aten


@lowering(aten.relu.default)
def relu(self: TensorValue) -> TensorValue:
    """relu(Tensor self) -> Tensor"""
    return keep_nan(self, ops.relu(self))


@lowering(aten.gelu.default)
@opmath
def gelu(self: TensorValue, *, approximate: str = "none") -> TensorValue:
    """gelu(Tensor self, *, str approximate="none") -> Tensor"""
    return ops.gelu(self, approximate=approximate)


@lowering(aten.silu.default)
@opmath
def silu(self: TensorValue) -> TensorValue:
    """silu(Tensor self) -> Tensor"""
    return ops.silu(self)


@lowering(aten.sigmoid.default)
@opmath
def sigmoid(self: TensorValue) -> TensorValue:
    """sigmoid(Tensor self) -> Tensor"""
    return torch_sigmoid(as_tensor(self, out_max_dtype()))  # integers: float


@lowering(aten.tanh.default)
@opmath
def tanh(self: TensorValue) -> TensorValue:
    """tanh(Tensor self) -> Tensor"""
    return torch_tanh(as_tensor(self, out_max_dtype()))  # integers: float


def _along_last(
    x: TensorValue, dim: int, fn: Callable[[TensorValue, int], TensorValue]
) -> TensorValue:
    # MAX's softmax kernels reduce the innermost axis: move ``dim`` there.
    axis = normalize_dim(dim, x.rank)
    if x.rank == 0:
        return fn(ops.reshape(x, [1]), -1).reshape([])
    if axis == x.rank - 1:
        return fn(x, -1)
    return ops.transpose(fn(ops.transpose(x, axis, -1), -1), axis, -1)


def _nan_rows_as_torch(
    kernel: Callable[[TensorValue, int], TensorValue],
) -> Callable[[TensorValue, int], TensorValue]:
    """A MAX softmax kernel whose rows holding a NaN or +inf are NaN throughout,
    as torch's: MAX's give such a row zeros, NaN only at the NaN or infinity
    (a diverging model's NaNs would turn into numbers)."""

    def along(x: TensorValue, axis: int) -> TensorValue:
        poisoned = ops.logical_or(
            ops.is_nan(x), ops.equal(x, as_tensor(math.inf, x.dtype))
        )
        flagged = reduce_max(ops.cast(poisoned, x.dtype), axis)
        return ops.where(
            ops.greater(flagged, as_tensor(0, x.dtype)),
            as_tensor(math.nan, x.dtype),
            kernel(x, axis),
        )

    return along


@lowering(aten._softmax.default)
@opmath
def softmax(self: TensorValue, dim: int, half_to_float: bool) -> TensorValue:
    """_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    return _along_last(self, dim, _nan_rows_as_torch(ops.softmax))


@lowering(aten._log_softmax.default)
@opmath
def log_softmax(self: TensorValue, dim: int, half_to_float: bool) -> TensorValue:
    """_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    return _along_last(self, dim, _nan_rows_as_torch(ops.logsoftmax))


@lowering(aten._softmax_backward_data.default)
@opmath
def softmax_backward(
    grad_output: TensorValue, output: TensorValue, dim: int, input_dtype: torch.dtype
) -> TensorValue:
    """_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor"""
    axis = normalize_dim(dim, output.rank)
    product = ops.mul(grad_output, output)
    return ops.sub(product, ops.mul(output, ops.sum(product, axis)))


@lowering(aten._log_softmax_backward_data.default)
@opmath
def log_softmax_backward(
    grad_output: TensorValue, output: TensorValue, dim: int, input_dtype: torch.dtype
) -> TensorValue:
    """_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor"""
    axis = normalize_dim(dim, output.rank)
    return ops.sub(grad_output, ops.mul(torch_exp(output), ops.sum(grad_output, axis)))


@lowering(aten.threshold_backward.default)
def threshold_backward(
    grad_output: TensorValue, self: TensorValue, threshold: Operand
) -> TensorValue:
    """threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor"""
    # Zero where self <= threshold, as torch: a NaN input passes its gradient.
    drop = ops.greater_equal(as_tensor(threshold, self.dtype), self)
    return ops.where(drop, as_tensor(0, grad_output.dtype), grad_output)


@lowering(aten.tanh_backward.default)
@opmath
def tanh_backward(grad_output: TensorValue, output: TensorValue) -> TensorValue:
    """tanh_backward(Tensor grad_output, Tensor output) -> Tensor"""
    one = as_tensor(1, output.dtype)
    return ops.mul(grad_output, ops.sub(one, ops.mul(output, output)))


@lowering(aten.sigmoid_backward.default)
@opmath
def sigmoid_backward(grad_output: TensorValue, output: TensorValue) -> TensorValue:
    """sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor"""
    one = as_tensor(1, output.dtype)
    return ops.mul(grad_output, ops.mul(output, ops.sub(one, output)))


@lowering(aten.gelu_backward.default)
@opmath
def gelu_backward(
    grad_output: TensorValue, self: TensorValue, *, approximate: str = "none"
) -> TensorValue:
    """gelu_backward(Tensor grad_output, Tensor self, *, str approximate="none") -> Tensor"""
    x = self

    def c(v: float) -> TensorValue:
        return as_tensor(v, x.dtype)

    if approximate == "tanh":
        k = 0.7978845608028654  # sqrt(2 / pi)
        x2 = ops.mul(x, x)
        inner = ops.mul(c(k), ops.add(x, ops.mul(c(0.044715), ops.mul(x2, x))))
        t = ops.tanh(inner)
        d_inner = ops.mul(c(k), ops.add(c(1.0), ops.mul(c(3 * 0.044715), x2)))
        left = ops.mul(c(0.5), ops.add(c(1.0), t))
        right = ops.mul(
            ops.mul(c(0.5), x), ops.mul(ops.sub(c(1.0), ops.mul(t, t)), d_inner)
        )
        return ops.mul(grad_output, ops.add(left, right))
    cdf = ops.mul(c(0.5), ops.add(c(1.0), ops.erf(ops.mul(x, c(0.7071067811865476)))))
    pdf = ops.mul(c(0.3989422804014327), ops.exp(ops.mul(c(-0.5), ops.mul(x, x))))
    return ops.mul(grad_output, ops.add(cdf, ops.mul(x, pdf)))


@lowering(aten.silu_backward.default)
@opmath
def silu_backward(grad_output: TensorValue, self: TensorValue) -> TensorValue:
    """silu_backward(Tensor grad_output, Tensor self) -> Tensor"""
    s = ops.sigmoid(self)
    one = as_tensor(1, self.dtype)
    return ops.mul(
        grad_output, ops.mul(s, ops.add(one, ops.mul(self, ops.sub(one, s))))
    )


# -- piecewise activations: Scalar parameters arrive as graph inputs -------------


def _positive(x: TensorValue) -> TensorValue:
    return ops.greater(x, as_tensor(0, x.dtype))


@lowering(aten.elu.default)
@opmath
def elu(
    self: TensorValue,
    alpha: Operand = 1,
    scale: Operand = 1,
    input_scale: Operand = 1,
) -> TensorValue:
    """elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor"""
    dt = self.dtype
    negative = ops.mul(
        as_tensor(alpha, dt),
        accurate_expm1(ops.mul(self, as_tensor(input_scale, dt))),
    )
    out = ops.mul(as_tensor(scale, dt), ops.where(_positive(self), self, negative))
    return keep_nan(self, out)


@lowering(aten.elu_backward.default)
@opmath
def elu_backward(
    grad_output: TensorValue,
    alpha: Operand,
    scale: Operand,
    input_scale: Operand,
    is_result: bool,
    self_or_result: TensorValue,
) -> TensorValue:
    """elu_backward(Tensor grad_output, Scalar alpha, Scalar scale, Scalar input_scale, bool is_result, Tensor self_or_result) -> Tensor"""
    dt = grad_output.dtype
    x = self_or_result
    s, a, i = as_tensor(scale, dt), as_tensor(alpha, dt), as_tensor(input_scale, dt)
    if is_result:
        # result = s * a * (exp(i x) - 1), so d/dx = i * (result + s * a).
        slope = ops.mul(i, ops.add(x, ops.mul(s, a)))
    else:
        slope = ops.mul(ops.mul(ops.mul(s, a), i), ops.exp(ops.mul(x, i)))
    # torch takes the positive slope wherever ``x <= 0`` is false, NaN
    # included (where the negative slope's exp(NaN) would give inf).
    at_most_zero = ops.greater_equal(as_tensor(0, x.dtype), x)
    return ops.mul(grad_output, ops.where(at_most_zero, slope, s))


@lowering(aten.hardtanh.default)
def hardtanh(
    self: TensorValue, min_val: Operand = -1, max_val: Operand = 1
) -> TensorValue:
    """hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor"""
    return at_most(at_least(self, min_val), max_val)


@lowering(aten.hardtanh_backward.default)
def hardtanh_backward(
    grad_output: TensorValue, self: TensorValue, min_val: Operand, max_val: Operand
) -> TensorValue:
    """hardtanh_backward(Tensor grad_output, Tensor self, Scalar min_val, Scalar max_val) -> Tensor"""
    dt = self.dtype
    # torch passes the gradient wherever x <= min and x >= max are both
    # false, a NaN included.
    outside = ops.logical_or(
        ops.greater_equal(as_tensor(min_val, dt), self),
        ops.greater_equal(self, as_tensor(max_val, dt)),
    )
    return ops.where(outside, as_tensor(0, grad_output.dtype), grad_output)


@lowering(aten.softshrink_backward.default)
def softshrink_backward(
    grad_output: TensorValue, self: TensorValue, lambd: Operand
) -> TensorValue:
    """softshrink_backward(Tensor grad_output, Tensor self, Scalar lambd) -> Tensor"""
    dt = self.dtype
    # As eager: zero where -lambd <= x <= lambd, so a NaN passes the gradient
    # (torch's decomposition zeroed it).
    inside = ops.logical_and(
        ops.greater_equal(self, ops.negate(as_tensor(lambd, dt))),
        ops.greater_equal(as_tensor(lambd, dt), self),
    )
    return ops.where(inside, as_tensor(0, grad_output.dtype), grad_output)


@lowering(aten.leaky_relu.default)
def leaky_relu(self: TensorValue, negative_slope: Operand = 0.01) -> TensorValue:
    """leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor"""
    scaled = ops.mul(self, as_tensor(negative_slope, self.dtype))
    return ops.where(_positive(self), self, scaled)


@lowering(aten.leaky_relu_backward.default)
def leaky_relu_backward(
    grad_output: TensorValue,
    self: TensorValue,
    negative_slope: Operand,
    self_is_result: bool,
) -> TensorValue:
    """leaky_relu_backward(Tensor grad_output, Tensor self, Scalar negative_slope, bool self_is_result) -> Tensor"""
    scaled = ops.mul(grad_output, as_tensor(negative_slope, grad_output.dtype))
    return ops.where(_positive(self), grad_output, scaled)
