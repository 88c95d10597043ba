# Attention of one query row a head over a key/value cache on the CPU: a
# decode step's. Written out as MAX ops (scores, softmax, weighted sum) it
# is several kernels that each pass over the scores, and at one query row
# neither the summed nor the matmul form has anything to reuse: eight
# layers at batch 8 took 2.6-3.2 ms against 1.1 for PyTorch's kernel (Intel
# Xeon, 2 cores; docs/benchmarks.md). Here each task takes one batch entry
# and one key/value head, and passes once over its keys and values for
# every query head of the group that shares them, a chunk of keys at a
# time: the chunk's scores, their weights a vector at a time, and a running
# maximum, sum and weighted sum (rescaled when a chunk holds a larger
# score), so that the cache is read once.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import exp
from std.memory import stack_allocation
from std.sys import simd_width_of

# The widest head this kernel takes (its running sums live on the stack).
comptime _MOST_DIM = 256
# The most query heads sharing one key/value head.
comptime _MOST_GROUP = 16
comptime _F32 = DType.float32
# Keys scored at a time: their weights are taken together, a vector at a
# time, and the running sums rescaled at most once a chunk.
comptime _CHUNK = 128


@extensibility.register("torch_max_backend_one_query_attention")
struct OneQueryAttention:
    """`output[b, h, :]` = softmax over t of (q[b, h] . k[b, h / g, t] *
    scale + mask[b', h', t]) weighting v[b, h / g, t], g = Hq / Hkv; q and
    output [B, Hq, D], k and v [B, Hkv, T, D], mask [Bm, Hm, T] with Bm in
    {1, B} and Hm in {1, Hq} (broadcast), all float32, dense, row-major. A
    row whose every weight is 0 (every key at -inf) gives zeros."""

    @staticmethod
    def execute[
        target: StaticString,
    ](
        output: OutputTensor[dtype=_F32, rank=3, ...],
        q: InputTensor[dtype=_F32, rank=3, ...],
        k: InputTensor[dtype=_F32, rank=4, ...],
        v: InputTensor[dtype=_F32, rank=4, ...],
        mask: InputTensor[dtype=_F32, rank=3, ...],
        scale: InputTensor[dtype=_F32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_one_query_attention runs on CPU"
        var batch = q.dim_size(0)
        var heads = q.dim_size(1)
        var dim = q.dim_size(2)
        var kv_heads = k.dim_size(1)
        var keys = k.dim_size(2)
        var mask_batch = mask.dim_size(0)
        var mask_heads = mask.dim_size(1)
        if dim > _MOST_DIM or kv_heads == 0 or heads % kv_heads != 0 or heads // kv_heads > _MOST_GROUP:
            raise Error("torch_max_backend_one_query_attention: unsupported head sizes")
        if q.strides()[2] != 1 or q.strides()[1] != dim or q.strides()[0] != heads * dim:
            raise Error("torch_max_backend_one_query_attention: q must be dense")
        if output.strides()[2] != 1 or output.strides()[1] != dim or output.strides()[0] != heads * dim:
            raise Error("torch_max_backend_one_query_attention: output must be dense")
        var k_dense = k.strides()[3] == 1 and k.strides()[2] == dim and k.strides()[1] == keys * dim
        var v_dense = v.strides()[3] == 1 and v.strides()[2] == dim and v.strides()[1] == keys * dim
        if not k_dense or not v_dense or k.strides()[0] != kv_heads * keys * dim or v.strides()[0] != kv_heads * keys * dim:
            raise Error("torch_max_backend_one_query_attention: k and v must be dense")
        if mask.strides()[2] != 1 or mask.strides()[1] != keys or mask.strides()[0] != mask_heads * keys:
            raise Error("torch_max_backend_one_query_attention: mask must be dense")
        var group = heads // kv_heads
        var qp = q.unsafe_ptr()
        var kp = k.unsafe_ptr()
        var vp = v.unsafe_ptr()
        var mp = mask.unsafe_ptr()
        var op = output.unsafe_ptr()
        var factor = scale.unsafe_ptr().unsafe_load()
        comptime dtype = _F32
        comptime width = simd_width_of[dtype]()

        def attend(task: Int) {var}:
            var b = task // kv_heads
            var g = task % kv_heads
            var kv_base = (b * kv_heads + g) * keys * dim
            var mb = b if mask_batch > 1 else 0
            var acc = stack_allocation[_MOST_GROUP * _MOST_DIM, dtype]()
            var peak = stack_allocation[_MOST_GROUP, dtype]()
            var total = stack_allocation[_MOST_GROUP, dtype]()
            var scores = stack_allocation[_CHUNK, dtype]()
            for j in range(group):
                peak.unsafe_offset(j).unsafe_store(Scalar[dtype].MIN)
                total.unsafe_offset(j).unsafe_store(Scalar[dtype](0))
                for d in range(dim):
                    acc.unsafe_offset(j * _MOST_DIM + d).unsafe_store(Scalar[dtype](0))
            var t0 = 0
            while t0 < keys:
                var count = min(_CHUNK, keys - t0)
                for j in range(group):
                    var h = g * group + j
                    var qrow = qp.unsafe_offset((b * heads + h) * dim)
                    var mh = h if mask_heads > 1 else 0
                    var mrow = mp.unsafe_offset((mb * mask_heads + mh) * keys + t0)
                    # The chunk's scores, and their maximum.
                    var top = Scalar[dtype].MIN
                    for t in range(count):
                        var krow = kp.unsafe_offset(kv_base + (t0 + t) * dim)
                        var dot = SIMD[dtype, width](0)
                        var d = 0
                        while d + width <= dim:
                            dot = qrow.unsafe_offset(d).unsafe_load[width=width]().fma(
                                krow.unsafe_offset(d).unsafe_load[width=width](), dot
                            )
                            d += width
                        var score = dot.reduce_add()
                        while d < dim:
                            score += qrow.unsafe_offset(d).unsafe_load() * krow.unsafe_offset(d).unsafe_load()
                            d += 1
                        score = score * factor + mrow.unsafe_offset(t).unsafe_load()
                        scores.unsafe_offset(t).unsafe_store(score)
                        top = max(top, score)
                    var old = peak.unsafe_offset(j).unsafe_load()
                    var new = max(old, top)
                    if new == Scalar[dtype].MIN:
                        continue  # every key so far hidden (-inf): weights 0
                    var row = acc.unsafe_offset(j * _MOST_DIM)
                    if new > old:
                        # What was summed so far shrinks by exp(old - new)
                        # relative to the new maximum (0 from -inf).
                        var shrink = SIMD[dtype, width](exp(SIMD[dtype, 1](old - new)))
                        var e = 0
                        while e + width <= dim:
                            row.unsafe_offset(e).unsafe_store(row.unsafe_offset(e).unsafe_load[width=width]() * shrink)
                            e += width
                        while e < dim:
                            row.unsafe_offset(e).unsafe_store(row.unsafe_offset(e).unsafe_load() * shrink[0])
                            e += 1
                        total.unsafe_offset(j).unsafe_store(total.unsafe_offset(j).unsafe_load() * shrink[0])
                        peak.unsafe_offset(j).unsafe_store(new)
                    # Weights exp(score - max), a vector at a time.
                    var sum = SIMD[dtype, width](0)
                    var t = 0
                    while t + width <= count:
                        var w = exp(scores.unsafe_offset(t).unsafe_load[width=width]() - new)
                        scores.unsafe_offset(t).unsafe_store(w)
                        sum += w
                        t += width
                    var tail = sum.reduce_add()
                    while t < count:
                        var w = exp(SIMD[dtype, 1](scores.unsafe_offset(t).unsafe_load() - new))
                        scores.unsafe_offset(t).unsafe_store(w[0])
                        tail += w[0]
                        t += 1
                    total.unsafe_offset(j).unsafe_store(total.unsafe_offset(j).unsafe_load() + tail)
                    for u in range(count):
                        var vrow = vp.unsafe_offset(kv_base + (t0 + u) * dim)
                        var weight = scores.unsafe_offset(u).unsafe_load()
                        var wv = SIMD[dtype, width](weight)
                        var e = 0
                        while e + width <= dim:
                            row.unsafe_offset(e).unsafe_store(
                                wv.fma(vrow.unsafe_offset(e).unsafe_load[width=width](), row.unsafe_offset(e).unsafe_load[width=width]())
                            )
                            e += width
                        while e < dim:
                            row.unsafe_offset(e).unsafe_store(row.unsafe_offset(e).unsafe_load() + weight * vrow.unsafe_offset(e).unsafe_load())
                            e += 1
                t0 += count
            for j in range(group):
                var h = g * group + j
                var out = op.unsafe_offset((b * heads + h) * dim)
                var sum = total.unsafe_offset(j).unsafe_load()
                var inverse = Scalar[dtype](0) if sum == 0 else Scalar[dtype](1) / sum
                for d in range(dim):
                    out.unsafe_offset(d).unsafe_store(acc.unsafe_offset(j * _MOST_DIM + d).unsafe_load() * inverse)

        if batch * kv_heads > 0:
            parallelize(attend, batch * kv_heads)
