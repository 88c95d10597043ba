"""Activations and softmax, with the backward ops that autograd leaves for them."""

from __future__ import annotations

from collections.abc import Callable

import torch
from max.graph import TensorValue, ops

from ..registry import lowering
from ..scalars import Operand, as_tensor
from ..shapes import normalize_dim

aten = torch.ops.aten


@lowering(aten.relu.default)
def relu(self: TensorValue) -> TensorValue:
    """relu(Tensor self) -> Tensor"""
    return ops.relu(self)


@lowering(aten.gelu.default)
def gelu(self: TensorValue, *, approximate: str = "none") -> TensorValue:
    """gelu(Tensor self, *, str approximate="none") -> Tensor"""
    return ops.gelu(self, approximate=approximate)


@lowering(aten.silu.default)
def silu(self: TensorValue) -> TensorValue:
    """silu(Tensor self) -> Tensor"""
    return ops.silu(self)


@lowering(aten.sigmoid.default)
def sigmoid(self: TensorValue) -> TensorValue:
    """sigmoid(Tensor self) -> Tensor"""
    return ops.sigmoid(self)


@lowering(aten.tanh.default)
def tanh(self: TensorValue) -> TensorValue:
    """tanh(Tensor self) -> Tensor"""
    return ops.tanh(self)


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


@lowering(aten._softmax.default)
def softmax(self: TensorValue, dim: int, half_to_float: bool) -> TensorValue:
    """_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    return _along_last(self, dim, ops.softmax)


@lowering(aten._log_softmax.default)
def log_softmax(self: TensorValue, dim: int, half_to_float: bool) -> TensorValue:
    """_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor"""
    return _along_last(self, dim, ops.logsoftmax)


@lowering(aten._softmax_backward_data.default)
def softmax_backward(
    grad_output: TensorValue, output: TensorValue, dim: int, input_dtype: torch.dtype
) -> TensorValue:
    """_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor"""
    axis = normalize_dim(dim, output.rank)
    product = ops.mul(grad_output, output)
    return ops.sub(product, ops.mul(output, ops.sum(product, axis)))


@lowering(aten._log_softmax_backward_data.default)
def log_softmax_backward(
    grad_output: TensorValue, output: TensorValue, dim: int, input_dtype: torch.dtype
) -> TensorValue:
    """_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor"""
    axis = normalize_dim(dim, output.rank)
    return ops.sub(grad_output, ops.mul(ops.exp(output), ops.sum(grad_output, axis)))


@lowering(aten.threshold_backward.default)
def threshold_backward(
    grad_output: TensorValue, self: TensorValue, threshold: Operand
) -> TensorValue:
    """threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor"""
    keep = ops.greater(self, as_tensor(threshold, self.dtype))
    return ops.where(keep, grad_output, as_tensor(0, grad_output.dtype))


@lowering(aten.tanh_backward.default)
def tanh_backward(grad_output: TensorValue, output: TensorValue) -> TensorValue:
    """tanh_backward(Tensor grad_output, Tensor output) -> Tensor"""
    one = as_tensor(1, output.dtype)
    return ops.mul(grad_output, ops.sub(one, ops.mul(output, output)))


@lowering(aten.sigmoid_backward.default)
def sigmoid_backward(grad_output: TensorValue, output: TensorValue) -> TensorValue:
    """sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor"""
    one = as_tensor(1, output.dtype)
    return ops.mul(grad_output, ops.mul(output, ops.sub(one, output)))


@lowering(aten.gelu_backward.default)
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
def silu_backward(grad_output: TensorValue, self: TensorValue) -> TensorValue:
    """silu_backward(Tensor grad_output, Tensor self) -> Tensor"""
    s = ops.sigmoid(self)
    one = as_tensor(1, self.dtype)
    return ops.mul(
        grad_output, ops.mul(s, ops.add(one, ops.mul(self, ops.sub(one, s))))
    )
