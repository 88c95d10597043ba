# The gradients of a depthwise convolution over channels-last images. The
# input gradient is the convolution's window sum taken from the other side:
# each input pixel gathers the output pixels whose windows read it, so no
# two tasks write one value. The weight gradient sums each tap's products
# over every output pixel, a vector of channels at a time.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.memory import stack_allocation
from std.sys import simd_width_of

from .taps import ACC, end_tap, first_tap


@always_inline
def _gathered_sum[
    dtype: DType, //, lanes: Int
](
    grad: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    taps: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    grad_at: UnsafePointer[Int, MutUntrackedOrigin],
    tap_at: UnsafePointer[Int, MutUntrackedOrigin],
    count: Int,
) -> SIMD[ACC, lanes]:
    """The sum over k < count of grad[grad_at[k]] * taps[tap_at[k]] for
    `lanes` channels: the output pixels whose windows read one input pixel,
    each by its tap; `grad` and `taps` point at the same channel."""
    var total = SIMD[ACC, lanes](0)
    for k in range(count):
        var g = grad.unsafe_offset(grad_at.unsafe_offset(k).unsafe_load()).unsafe_load[width=lanes]()
        var w = taps.unsafe_offset(tap_at.unsafe_offset(k).unsafe_load()).unsafe_load[width=lanes]()
        total += g.cast[ACC]() * w.cast[ACC]()
    return total


@extensibility.register("torch_max_backend_depthwise_input_grad")
struct DepthwiseInputGrad:
    """The input gradient of that convolution: `output[n, h, w, c]` = the
    sum over the taps (i, j) and output pixels (oh, ow) with oh * sh - ph +
    i * dh = h and ow * sw - pw + j * dw = w of `grad[n, oh, ow, c] *
    filters[i, j, c]`. `grad` is (N, out_h, out_w, C), the output (N, H, W,
    C), `filters` [kh, kw, C]. CPU only.
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
        filters: InputTensor[dtype=dtype, rank=3, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_depthwise_input_grad runs on CPU"
        comptime lanes = simd_width_of[ACC]()
        var out_h = grad.dim_size(1)
        var out_w = grad.dim_size(2)
        var channels = grad.dim_size(3)
        var height = output.dim_size(1)
        var width = output.dim_size(2)
        var gp = grad.unsafe_ptr()
        var fp = filters.unsafe_ptr()
        var op = output.unsafe_ptr()

        # One task per input row of one image.
        def row(task: Int) {var}:
            var n = task // height
            var h = task % height
            var image = gp.unsafe_offset(n * out_h * out_w * channels)
            # Each pixel's readers: where their gradient and tap lie.
            var grad_at = stack_allocation[kh * kw, Int]()
            var tap_at = stack_allocation[kh * kw, Int]()
            for w in range(width):
                var count = 0
                for i in range(kh):
                    var t = h + ph - i * dh
                    if t < 0 or t % sh != 0 or t // sh >= out_h:
                        continue
                    for j in range(kw):
                        var u = w + pw - j * dw
                        if u < 0 or u % sw != 0 or u // sw >= out_w:
                            continue
                        grad_at.unsafe_offset(count).unsafe_store(
                            ((t // sh) * out_w + u // sw) * channels
                        )
                        tap_at.unsafe_offset(count).unsafe_store((i * kw + j) * channels)
                        count += 1
                var dst = op.unsafe_offset((task * width + w) * channels)
                var c = 0
                while c + lanes <= channels:
                    var total = _gathered_sum[lanes](
                        image.unsafe_offset(c), fp.unsafe_offset(c), grad_at, tap_at, count
                    )
                    dst.unsafe_offset(c).unsafe_store(total.cast[dtype]())
                    c += lanes
                while c < channels:
                    var one = _gathered_sum[1](
                        image.unsafe_offset(c), fp.unsafe_offset(c), grad_at, tap_at, count
                    )
                    dst.unsafe_offset(c).unsafe_store(one.cast[dtype]())
                    c += 1

        parallelize(row, grad.dim_size(0) * height)


@always_inline
def _tap_sum[
    dtype: DType, //, lanes: Int, sw: Int, dw: Int
](
    grad: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    x: UnsafePointer[Scalar[dtype], ImmutAnyOrigin],
    rows: Int,
    row_step: Int,
    x_row_step: Int,
    ow_lo: Int,
    ow_hi: Int,
    channels: Int,
) -> SIMD[ACC, lanes]:
    """The sum over `rows` output rows and the columns [ow_lo, ow_hi) of
    grad[r, ow] * x[r, ow * sw + j * dw] for `lanes` channels: `grad`
    points at the first row's output pixel 0, `x` at the input pixel its
    tap reads for output column 0 of that row (which may lie in the
    padding: only columns inside are read)."""
    var total = SIMD[ACC, lanes](0)
    for r in range(rows):
        var g_row = grad.unsafe_offset(r * row_step)
        var x_row = x.unsafe_offset(r * x_row_step)
        for ow in range(ow_lo, ow_hi):
            var g = g_row.unsafe_offset(ow * channels).unsafe_load[width=lanes]()
            var v = x_row.unsafe_offset(ow * sw * channels).unsafe_load[width=lanes]()
            total += g.cast[ACC]() * v.cast[ACC]()
    return total


@extensibility.register("torch_max_backend_depthwise_weight_grad_last")
struct DepthwiseWeightGradLast:
    """The weight gradient of that convolution, [kh, kw, C]: `output[i, j,
    c]` = the sum over images n and output pixels (oh, ow) of `grad[n, oh,
    ow, c] * x[n, oh * sh - ph + i * dh, ow * sw - pw + j * dw, c]`,
    pixels in the padding adding nothing. `grad` is (N, out_h, out_w, C),
    `x` (N, H, W, C): vectors of channels for every stride, where the
    channels-first kernel (kernels/mojo/depthwise_weight_grad.mojo) reads
    single values but for stride 1. One task per tap and vector of
    channels. CPU only.
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
        output: OutputTensor[dtype=dtype, rank=3, ...],
        grad: InputTensor[dtype=dtype, rank=4, ...],
        x: InputTensor[dtype=dtype, rank=4, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_depthwise_weight_grad_last runs on CPU"
        comptime lanes = simd_width_of[ACC]()
        var batch = grad.dim_size(0)
        var out_h = grad.dim_size(1)
        var out_w = grad.dim_size(2)
        var channels = grad.dim_size(3)
        var height = x.dim_size(1)
        var width = x.dim_size(2)
        var gp = grad.unsafe_ptr()
        var xp = x.unsafe_ptr()
        var op = output.unsafe_ptr()
        var chunks = (channels + lanes - 1) // lanes

        def tap(task: Int) {var}:
            var t = task // chunks
            var c = (task % chunks) * lanes
            var i = t // kw
            var j = t % kw
            # The output rows and columns whose tap (i, j) lies inside.
            var oh_lo = first_tap(i * dh - ph, sh, out_h)
            var oh_hi = end_tap(i * dh - ph, sh, out_h, height, oh_lo)
            var ow_lo = first_tap(j * dw - pw, sw, out_w)
            var ow_hi = end_tap(j * dw - pw, sw, out_w, width, ow_lo)
            var row_step = out_w * channels
            var x_row_step = sh * width * channels
            var total = SIMD[ACC, lanes](0)
            var tail = min(lanes, channels - c)
            for n in range(batch):
                var g0 = gp.unsafe_offset((n * out_h + oh_lo) * row_step + c)
                var x0 = xp.unsafe_offset(
                    ((n * height + oh_lo * sh - ph + i * dh) * width - pw + j * dw)
                    * channels
                    + c
                )
                if tail == lanes:
                    total += _tap_sum[lanes, sw, dw](
                        g0, x0, oh_hi - oh_lo, row_step, x_row_step,
                        ow_lo, ow_hi, channels,
                    )
                else:
                    for k in range(tail):
                        total[k] += _tap_sum[1, sw, dw](
                            g0.unsafe_offset(k), x0.unsafe_offset(k),
                            oh_hi - oh_lo, row_step, x_row_step,
                            ow_lo, ow_hi, channels,
                        )
            var dst = op.unsafe_offset(t * channels + c)
            if tail == lanes:
                dst.unsafe_store(total.cast[dtype]())
            else:
                for k in range(tail):
                    dst.unsafe_offset(k).unsafe_store(total[k].cast[dtype]())

        parallelize(tap, kh * kw * chunks)
