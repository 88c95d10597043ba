# float32 rounded to bfloat16 (to nearest, ties to even, as torch rounds) with
# integer arithmetic on the bits, 16 or more values an instruction. MAX 26.7's
# CPU cast to bfloat16 converts about 0.9 values a nanosecond on an AVX-512
# Xeon (512x1536: 0.9 ms, where this kernel takes 0.1), and a half-precision
# model rounds after every elementwise op, as torch does.

import extensibility
from extensibility import InputTensor, OutputTensor, foreach
from max.gpu.host import DeviceContext
from std.memory import bitcast
from std.utils.coord import Coord


@extensibility.register("torch_max_backend_round_bfloat16")
struct RoundBfloat16:
    """`output = x` rounded from float32 to bfloat16; NaN stays NaN (quiet)."""

    @staticmethod
    def execute[rank: Int, //, target: StaticString](
        output: OutputTensor[dtype=DType.bfloat16, rank=rank, ...],
        x: InputTensor[dtype=DType.float32, rank=rank, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_round_bfloat16 runs on CPU"

        def func[width: Int](idx: Coord) {var} -> SIMD[DType.bfloat16, width]:
            var v = x.load[width](idx)
            var bits = bitcast[DType.uint32, width](v)
            # Adding 0x7FFF plus the kept part's lowest bit carries into the
            # kept 16 bits exactly when the dropped ones are over half, or
            # half with an odd kept part; infinities carry nothing.
            var rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            # A NaN could carry into the exponent's sign: keep it a quiet NaN.
            var quiet = (bits >> 16) | 0x40
            var half = v.ne(v).select(quiet, rounded).cast[DType.uint16]()
            return bitcast[DType.bfloat16, width](half)

        foreach[target=target](func, output, ctx)
