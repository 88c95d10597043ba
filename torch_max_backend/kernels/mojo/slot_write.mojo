# One position of a KV cache written in place: a decode step's cache update.
# MAX's own slice store (ops.buffer_store_slice) takes its start and stop as
# vectors stacked from scalars (six kernel launches a vector, three vectors a
# store: 288 of the 740 launches of a GPT-2 small decode step) and read on
# the host, and it needed a condition around it to leave the cache as it was
# when the call is refused. Here the position is read inside the kernel,
# which writes nothing for a refused call (the graph then raises eager's
# IndexError after the call). Left out altogether, the stores took 1.9 ms
# off that step's 22 ms in MAX (AMD EPYC Zen 4, 2026-11-28); this kernel
# took 0.2 to 1.4 ms off in three such comparisons.

import extensibility
from extensibility import InputTensor
# MAX 26.7 exports the mutable-input spec under this private name only.
from extensibility.managed_tensor_slice import (
    _MutableInputTensor as MutableInputTensor,
)
from max.gpu.host import DeviceContext
from std.sys import simd_width_of
from std.utils.index import IndexList


@extensibility.register("torch_max_backend_write_slot")
struct WriteSlot:
    """`cache[..., position, ...] = source[..., 0, ...]` along `dim`, when
    `keep` holds; nothing when it does not. `source` is `cache`'s shape with
    1 at `dim`."""

    @staticmethod
    def execute[
        dtype: DType, rank: Int, //, dim: Int, target: StaticString
    ](
        cache: MutableInputTensor[dtype=dtype, rank=rank, ...],
        source: InputTensor[dtype=dtype, rank=rank, ...],
        position: InputTensor[dtype=DType.int64, rank=1, ...],
        keep: InputTensor[dtype=DType.bool, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_write_slot runs on CPU"
        comptime assert dim >= 0 and dim < rank, "dim is one of the cache's dims"
        if not keep.load[1](IndexList[1](0)):
            return
        var slot = Int(position.load[1](IndexList[1](0)))
        # One run of values along the last dim per index of the others,
        # copied a vector at a time. One value at a time (an index decomposed
        # per value), GPT-2 small's batch-8 decode step executed in 46.2-49.3
        # ms; so, in 41.3-43.9 (alternating processes, AMD EPYC Zen 4,
        # 2026-11-28).
        comptime last = rank - 1
        comptime width = simd_width_of[dtype]()
        var run = source.dim_size(last)
        var runs = 1
        for i in range(last):
            runs *= source.dim_size(i)
        # A few thousand values at most (one position of every head and
        # batch row): one task, no parallel dispatch to wait for.
        for r in range(runs):
            var at = IndexList[rank](0)
            var rest = r
            for i in reversed(range(last)):
                at[i] = rest % source.dim_size(i)
                rest //= source.dim_size(i)
            var to = at
            to[dim] = slot
            var j = 0
            while j + width <= run:
                at[last] = j
                to[last] = slot + j if dim == last else j
                cache.store[width](to, source.load[width](at))
                j += width
            while j < run:
                at[last] = j
                to[last] = slot + j if dim == last else j
                cache.store[1](to, source.load[1](at))
                j += 1
