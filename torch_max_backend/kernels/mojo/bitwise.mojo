# Bitwise and, or, xor and not of integer tensors: MAX's ops cover booleans only.

import extensibility
from extensibility import InputTensor, OutputTensor, foreach
from max.gpu.host import DeviceContext
from std.utils.coord import Coord


@extensibility.register("torch_max_backend_bitwise")
struct Bitwise:
    """Elementwise `x op y` of two integer tensors of one shape and dtype.

    `op` is 0 for and, 1 for or, 2 for xor (the lowering broadcasts and casts
    the operands first).
    """

    @staticmethod
    def execute[dtype: DType, rank: Int, //, op: Int, target: StaticString](
        output: OutputTensor[dtype=dtype, rank=rank, ...],
        x: InputTensor[dtype=dtype, rank=rank, ...],
        y: InputTensor[dtype=dtype, rank=rank, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert dtype.is_integral(), "bitwise ops take integer tensors"
        comptime assert op >= 0 and op <= 2, "op is 0 (and), 1 (or) or 2 (xor)"

        def func[width: Int](idx: Coord) {var} -> SIMD[dtype, width]:
            var a = x.load[width](idx)
            var b = y.load[width](idx)
            comptime if op == 0:
                return a & b
            comptime if op == 1:
                return a | b
            return a ^ b

        foreach[target=target](func, output, ctx)


@extensibility.register("torch_max_backend_bitwise_not")
struct BitwiseNot:
    """Elementwise `~x` of an integer tensor."""

    @staticmethod
    def execute[dtype: DType, rank: Int, //, target: StaticString](
        output: OutputTensor[dtype=dtype, rank=rank, ...],
        x: InputTensor[dtype=dtype, rank=rank, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert dtype.is_integral(), "bitwise ops take integer tensors"

        def func[width: Int](idx: Coord) {var} -> SIMD[dtype, width]:
            return ~x.load[width](idx)

        foreach[target=target](func, output, ctx)
