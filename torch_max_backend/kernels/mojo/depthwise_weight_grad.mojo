# The weight gradient of a depthwise convolution (each output channel reads
# one input channel: MobileNet's and ConvNeXt's 3x3 and 7x7 layers). Built
# from MAX ops it took a strided slice of the padded input per kernel offset,
# a stack and a batched product: about 150 ops a layer in a backward graph,
# each compiled on its own (ConvNeXt's backward: 98 slices of 624 ops).
# Here one task per output channel sums its window products directly.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.sys import simd_width_of
from std.utils.index import IndexList


@extensibility.register("torch_max_backend_depthwise_weight_grad")
struct DepthwiseWeightGrad:
    """`output[o, 0, i, j]` = the sum over images n and output pixels (oh, ow)
    of `grad[n, o, oh, ow] * x[n, c, oh * sh - ph + i * dh, ow * sw - pw + j * dw]`,
    where c = o // (O / C) is the one input channel output channel o reads
    (a [O, 1, kh, kw] filter, O a multiple of C); pixels in the padding add
    nothing. `grad` is [N, O, out_h, out_w], `x` [N, C, H, W]. CPU only: the
    lowering builds it from MAX ops on GPUs.
    """

    @staticmethod
    def execute[
        dtype: DType,
        //,
        kh: Int,
        kw: Int,
        sh: Int,
        sw: Int,
        ph: Int,
        pw: Int,
        dh: Int,
        dw: Int,
        target: StaticString,
    ](
        output: OutputTensor[dtype=dtype, rank=4, ...],
        grad: InputTensor[dtype=dtype, rank=4, ...],
        x: InputTensor[dtype=dtype, rank=4, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_depthwise_weight_grad runs on CPU"
        comptime width = simd_width_of[dtype]()
        var batch = grad.dim_size(0)
        var out_channels = grad.dim_size(1)
        var out_h = grad.dim_size(2)
        var out_w = grad.dim_size(3)
        var height = x.dim_size(2)
        var width_in = x.dim_size(3)
        var multiplier = out_channels // x.dim_size(1)

        def channel(o: Int) {var}:
            var c = o // multiplier
            for i in range(kh):
                for j in range(kw):
                    # The output columns whose input column is inside the
                    # image: ow * sw - pw + j * dw in [0, W).
                    var lead = pw - j * dw
                    var first = 0 if lead <= 0 else (lead + sw - 1) // sw
                    var last = width_in - 1 + lead
                    var stop = 0 if last < 0 else min(out_w, last // sw + 1)
                    var lanes = SIMD[dtype, width](0)
                    var total = Scalar[dtype](0)
                    for n in range(batch):
                        for oh in range(out_h):
                            var h = oh * sh - ph + i * dh
                            if h < 0 or h >= height:
                                continue
                            var ow = first
                            comptime if sw == 1:
                                while ow + width <= stop:
                                    lanes += grad.load[width](
                                        IndexList[4](n, o, oh, ow)
                                    ) * x.load[width](IndexList[4](n, c, h, ow - lead))
                                    ow += width
                            while ow < stop:
                                total += grad.load[1](IndexList[4](n, o, oh, ow)) * x.load[
                                    1
                                ](IndexList[4](n, c, h, ow * sw - lead))
                                ow += 1
                    output.store[1](
                        IndexList[4](o, 0, i, j), lanes.reduce_add() + total
                    )

        parallelize(channel, out_channels)
