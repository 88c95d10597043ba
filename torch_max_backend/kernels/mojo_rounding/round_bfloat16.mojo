# float32 rounded to bfloat16 (to nearest, ties to even, as torch rounds) with
# integer arithmetic on the bits, 16 values an instruction. MAX 26.7's CPU
# cast to bfloat16 converts about 0.9 values a nanosecond on an AVX-512 Xeon
# (512x1536: 0.9 ms, where this kernel takes 0.1), and a half-precision model
# rounds after every elementwise op, as torch does.

import extensibility
from extensibility import InputTensor, OutputTensor, foreach
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.memory import bitcast
from std.sys.info import num_physical_cores
from std.utils.coord import Coord

comptime _WIDTH = 16
# Dense values from which the cores share the work. Below it one task runs
# them all: MAX's elementwise loop (`foreach`) split even 16384 values
# between the cores, and a rounding of 16384 to 196608 values then took
# 20-37 us longer than one core's loop; at 524288 the split leads by 7 %
# (8 roundings in one graph, a 2-core Intel Xeon, docs/benchmarks.md).
comptime _SHARED_FROM = 1 << 18


@always_inline
def _rounded[width: Int](v: SIMD[DType.float32, width]) -> SIMD[DType.bfloat16, width]:
    var bits = bitcast[DType.uint32, width](v)
    # Adding 0x7FFF plus the kept part's lowest bit carries into the kept 16
    # bits exactly when the dropped ones are over half, or half with an odd
    # kept part; infinities carry nothing.
    var nearest = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    # A NaN could carry into the exponent's sign: keep it a quiet NaN. Told
    # by its bits: MAX compiles kernels with fast-math flags, under which
    # `v != v` was folded to false (0x7FFFFFFF rounded to -0).
    var quiet = (bits >> 16) | 0x40
    var nan = (bits & 0x7FFFFFFF).gt(SIMD[DType.uint32, width](0x7F800000))
    return bitcast[DType.bfloat16, width](nan.select(quiet, nearest).cast[DType.uint16]())


def _round_run(
    src: UnsafePointer[Float32, ImmutAnyOrigin],
    dst: UnsafePointer[BFloat16, MutAnyOrigin],
    first: Int,
    end: Int,
):
    """`dst[i] = src[i]` rounded, for `first <= i < end`."""
    var i = first
    while i + _WIDTH <= end:
        dst.unsafe_offset(i).unsafe_store(
            _rounded[_WIDTH](src.unsafe_offset(i).unsafe_load[width=_WIDTH]())
        )
        i += _WIDTH
    while i < end:
        dst.unsafe_offset(i).unsafe_store(_rounded[1](src.unsafe_offset(i).unsafe_load()))
        i += 1


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
        # Both dense, row-major: one run of values, front to back.
        var count = 1
        var dense = True
        comptime for d in reversed(range(rank)):
            if x.dim_size(d) != 1 and (
                x.strides()[d] != count or output.strides()[d] != count
            ):
                dense = False
            count *= x.dim_size(d)
        if dense:
            var src = x.unsafe_ptr()
            var dst = output.unsafe_ptr()
            if count < _SHARED_FROM:
                _round_run(src, dst, 0, count)
                return
            var tasks = num_physical_cores()
            var block = ceildiv(ceildiv(count, tasks), _WIDTH) * _WIDTH

            def part(task: Int) {var}:
                var first = task * block
                _round_run(src, dst, first, min(count, first + block))

            parallelize(part, tasks)
            return

        # Strided memory (MAX wrote a transpose out first where it was
        # checked, but a view may come): value by index.
        def func[width: Int](idx: Coord) {var} -> SIMD[DType.bfloat16, width]:
            return _rounded[width](x.load[width](idx))

        foreach[target=target](func, output, ctx)
