# Swish, x * sigmoid(beta * x), and its derivative, as MAX custom ops.
# Used by custom_op_no_graph_break.py through torch_max_backend.mojo_op.

import extensibility
from extensibility import InputTensor, OutputTensor, foreach
from max.gpu.host import DeviceContext
from std.math import exp
from std.utils.coord import Coord


@extensibility.register("swish")
struct Swish:
    """out = x * sigmoid(beta * x), computed in float32, stored in x's dtype."""

    @staticmethod
    def execute[dtype: DType, rank: Int, //, beta: Float64, target: StaticString](
        output: OutputTensor[dtype=dtype, rank=rank, ...],
        x: InputTensor[dtype=dtype, rank=rank, ...],
        ctx: DeviceContext,
    ) raises:
        def func[width: Int](idx: Coord) {var} -> SIMD[dtype, width]:
            var v = x.load[width](idx).cast[DType.float32]()
            var b = Float32(beta)
            return (v / (1.0 + exp(-b * v))).cast[dtype]()

        foreach[target=target](func, output, ctx)


@extensibility.register("swish_backward")
struct SwishBackward:
    """out = grad * d/dx swish(x) = grad * (s + beta * x * s * (1 - s)),
    with s = sigmoid(beta * x)."""

    @staticmethod
    def execute[dtype: DType, rank: Int, //, beta: Float64, target: StaticString](
        output: OutputTensor[dtype=dtype, rank=rank, ...],
        grad: InputTensor[dtype=dtype, rank=rank, ...],
        x: InputTensor[dtype=dtype, rank=rank, ...],
        ctx: DeviceContext,
    ) raises:
        def func[width: Int](idx: Coord) {var} -> SIMD[dtype, width]:
            var g = grad.load[width](idx).cast[DType.float32]()
            var v = x.load[width](idx).cast[DType.float32]()
            var b = Float32(beta)
            var s = 1.0 / (1.0 + exp(-b * v))
            return (g * (s + b * v * s * (1.0 - s))).cast[dtype]()

        foreach[target=target](func, output, ctx)
