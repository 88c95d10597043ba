# A few rows times two or three weights stored [N, K] (nn.Linear's layout)
# that read the same input: a decode step's q, k and v projections, or its
# gate and up projections. Each product alone reads its weight at the
# memory's speed, but MAX charges each kernel a fixed cost of about 15 us
# (its launch and our kernel's tasks meeting at the end): for a llama-style
# model's 512 KB k and v projections most of their time. One kernel reads
# all the group's weights, its tasks taking blocks of their rows in turn.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.math import ceildiv
from std.memory import stack_allocation
from std.sys import simd_width_of
from std.sys.info import num_physical_cores
from std.utils.index import IndexList


@always_inline
def _dot_rows[
    dtype: DType, //, rows: Int
](
    output: OutputTensor[dtype=dtype, rank=2, ...],
    x: InputTensor[dtype=dtype, rank=2, ...],
    w: InputTensor[dtype=dtype, rank=2, ...],
    first: Int,
    last: Int,
):
    """output[:, first:last] = x @ w[first:last].T: each weight row read once,
    front to back; its dot product with each of x's rows kept in registers."""
    comptime width = simd_width_of[dtype]()
    var k_len = x.dim_size(1)
    var acc = stack_allocation[rows * width, dtype]()
    for n in range(first, last):
        comptime for m in range(rows):
            acc.unsafe_offset(m * width).unsafe_store(SIMD[dtype, width](0))
        var k = 0
        while k + width <= k_len:
            var wv = w.load[width](IndexList[2](n, k))
            comptime for m in range(rows):
                var a = acc.unsafe_offset(m * width)
                a.unsafe_store(
                    a.unsafe_load[width=width]()
                    + x.load[width](IndexList[2](m, k)) * wv
                )
            k += width
        comptime for m in range(rows):
            var total = acc.unsafe_offset(m * width).unsafe_load[width=width]().reduce_add()
            for tail in range(k, k_len):
                total += x.load[1](IndexList[2](m, tail)) * w.load[1](IndexList[2](n, tail))
            output.store[1](IndexList[2](m, n), total)


@always_inline
def _tasks(n_len: Int, block: Int) -> Int:
    return ceildiv(n_len, block)


@extensibility.register("torch_max_backend_two_row_products")
struct TwoRowProducts:
    """`out_a = x @ w_a.T` and `out_b = x @ w_b.T` for `rows` rows (1 to 8),
    the weights stored [N, K], in one kernel."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
        rows: Int,
        target: StaticString,
    ](
        out_a: OutputTensor[dtype=dtype, rank=2, ...],
        out_b: OutputTensor[dtype=dtype, rank=2, ...],
        x: InputTensor[dtype=dtype, rank=2, ...],
        w_a: InputTensor[dtype=dtype, rank=2, ...],
        w_b: InputTensor[dtype=dtype, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_two_row_products runs on CPU"
        var n_a = out_a.dim_size(1)
        var n_b = out_b.dim_size(1)
        # A few tasks a core over all the rows, so that a slow core does not
        # hold the rest up; a task never spans two weights.
        var block = max(1, ceildiv(n_a + n_b, 4 * num_physical_cores()))
        var tasks_a = _tasks(n_a, block)

        def task(t: Int) {var}:
            if t < tasks_a:
                _dot_rows[rows](out_a, x, w_a, t * block, min(n_a, (t + 1) * block))
            else:
                var u = t - tasks_a
                _dot_rows[rows](out_b, x, w_b, u * block, min(n_b, (u + 1) * block))

        parallelize(task, tasks_a + _tasks(n_b, block))


@extensibility.register("torch_max_backend_three_row_products")
struct ThreeRowProducts:
    """`out_a = x @ w_a.T`, `out_b = x @ w_b.T` and `out_c = x @ w_c.T` for
    `rows` rows (1 to 8), the weights stored [N, K], in one kernel."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
        rows: Int,
        target: StaticString,
    ](
        out_a: OutputTensor[dtype=dtype, rank=2, ...],
        out_b: OutputTensor[dtype=dtype, rank=2, ...],
        out_c: OutputTensor[dtype=dtype, rank=2, ...],
        x: InputTensor[dtype=dtype, rank=2, ...],
        w_a: InputTensor[dtype=dtype, rank=2, ...],
        w_b: InputTensor[dtype=dtype, rank=2, ...],
        w_c: InputTensor[dtype=dtype, rank=2, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_three_row_products runs on CPU"
        var n_a = out_a.dim_size(1)
        var n_b = out_b.dim_size(1)
        var n_c = out_c.dim_size(1)
        var block = max(1, ceildiv(n_a + n_b + n_c, 4 * num_physical_cores()))
        var tasks_a = _tasks(n_a, block)
        var tasks_ab = tasks_a + _tasks(n_b, block)

        def task(t: Int) {var}:
            if t < tasks_a:
                _dot_rows[rows](out_a, x, w_a, t * block, min(n_a, (t + 1) * block))
            elif t < tasks_ab:
                var u = t - tasks_a
                _dot_rows[rows](out_b, x, w_b, u * block, min(n_b, (u + 1) * block))
            else:
                var u = t - tasks_ab
                _dot_rows[rows](out_c, x, w_c, u * block, min(n_c, (u + 1) * block))

        parallelize(task, tasks_ab + _tasks(n_c, block))
