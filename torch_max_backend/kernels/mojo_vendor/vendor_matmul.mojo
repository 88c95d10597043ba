# Matrix products through a vendor CBLAS (MKL's `cblas_sgemm`; for bfloat16
# and float16 operands `cblas_gemm_bf16bf16f32` and `cblas_gemm_f16f16f32`,
# which sum in float32, the way PyTorch's own half-precision products do,
# each result then rounded once), loaded from
# the shared library the lowering found (`library`, an absolute path). Each
# MAX task hands one slice of the output's columns (or, for many rows and few
# columns, of its rows) to a single-threaded call: MAX's worker threads are
# the only pool, the vendor library starts none of its own.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.ffi import OwnedDLHandle, c_int
from std.math import ceildiv
from std.memory.alloc import unsafe_alloc
from std.sys.info import num_physical_cores

from .rounded_rows import bias_beta, fill_rows, fill_sums, store_rounded

comptime _ROW_MAJOR: c_int = 101
comptime _NO_TRANS: c_int = 111
comptime _TRANS: c_int = 112
# MKL's threading layer "sequential": no OpenMP team beside MAX's threads.
comptime _MKL_SEQUENTIAL: c_int = 1
# Columns a task takes at least: narrower slices cost more in calls than they
# gain in parallel work.
comptime _MIN_COLUMNS = 64


@extensibility.register("torch_max_backend_vendor_matmul")
struct VendorMatmul:
    """`output[M, N] = x[M, K] @ W (+ bias[N])` in float32 by the vendor's
    `cblas_sgemm` (bfloat16, float16: MKL's half-precision product into
    float32, rounded once), W stored [K, N], or [N, K] when `weight_nk` is set
    (a Linear's weight). A `bias` of N values joins the float32 sums before
    the one rounding, as PyTorch's addmm adds it; an empty one is none."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
        weight_nk: Bool,
        library: StaticString,
        target: StaticString,
    ](
        output: OutputTensor[dtype=dtype, rank=2, ...],
        x: InputTensor[dtype=dtype, rank=2, ...],
        w: InputTensor[dtype=dtype, rank=2, ...],
        bias: InputTensor[dtype=dtype, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_vendor_matmul runs on CPU"
        comptime assert (
            dtype == DType.float32 or dtype == DType.bfloat16 or dtype == DType.float16
        ), "the vendor product is float32, bfloat16 or float16"
        var m_len = x.dim_size(0)
        var k_len = x.dim_size(1)
        var n_len = output.dim_size(1)
        if m_len == 0 or n_len == 0:
            return
        var beta = bias_beta(bias.dim_size(0), bias.strides()[0], n_len, "torch_max_backend_vendor_matmul")
        var has_bias = beta != 0.0
        var d = bias.unsafe_ptr()
        if k_len == 0:
            # An empty sum, the bias alone; BLAS refuses a leading dimension of 0.
            if has_bias:
                fill_rows(output.unsafe_ptr(), d, m_len, n_len, n_len)
            else:
                for i in range(m_len * n_len):
                    output.unsafe_ptr().unsafe_offset(i).unsafe_store(Scalar[dtype](0))
            return
        var lib = OwnedDLHandle(library)
        var sgemm = lib.get_function[NoneType](
            "cblas_sgemm" if dtype == DType.float32 else (
                "cblas_gemm_bf16bf16f32" if dtype == DType.bfloat16
                else "cblas_gemm_f16f16f32"
            )
        )
        # Also set where this process's Python side did (vendor_blas.py): a
        # process that only runs exported graphs (the AOT runner) has not.
        var set_layer = lib.get_function[c_int]("MKL_Set_Threading_Layer")
        _ = set_layer(_MKL_SEQUENTIAL)
        var a = x.unsafe_ptr()
        var b = w.unsafe_ptr()
        var c = output.unsafe_ptr()
        # Either operand may reach the kernel as a view (MAX folds a transpose
        # into it): BLAS reads one unit-stride dim, its rows or its columns.
        var xs = x.strides()
        var ws = w.strides()
        if output.strides()[1] != 1 or output.strides()[0] != n_len:
            raise Error("torch_max_backend_vendor_matmul: output not dense")
        var trans_a = _NO_TRANS
        var lda = xs[0]
        if xs[1] != 1:
            if xs[0] != 1:
                raise Error("torch_max_backend_vendor_matmul: x has no unit stride")
            trans_a = _TRANS
            lda = xs[1]
        # W as [K, N] (b_k, b_n: its strides along K and N).
        var b_k = ws[1] if weight_nk else ws[0]
        var b_n = ws[0] if weight_nk else ws[1]
        var trans_b = _NO_TRANS
        var ldb = b_k
        if b_n != 1:
            if b_k != 1:
                raise Error("torch_max_backend_vendor_matmul: w has no unit stride")
            trans_b = _TRANS
            ldb = b_n
        # A leading dimension along a dim of size 1 is never stepped over:
        # BLAS still asks for at least the other dim's size.
        if (m_len if trans_a == _NO_TRANS else k_len) == 1:
            lda = k_len if trans_a == _NO_TRANS else m_len
        if (k_len if trans_b == _NO_TRANS else n_len) == 1:
            ldb = n_len if trans_b == _NO_TRANS else k_len
        if lda < (k_len if trans_a == _NO_TRANS else m_len) or ldb < (
            n_len if trans_b == _NO_TRANS else k_len
        ):
            raise Error("torch_max_backend_vendor_matmul: an operand overlaps itself")
        var cores = num_physical_cores()
        # Split the columns when there are enough of them, else the rows.
        var by_columns = n_len >= cores * _MIN_COLUMNS or m_len < cores
        var span = n_len if by_columns else m_len
        var tasks = max(1, min(cores, span // _MIN_COLUMNS if by_columns else span))
        var block = ceildiv(span, tasks)

        def slice(task: Int) {var}:
            var first = task * block
            var count = min(span, first + block) - first
            if count <= 0:
                return
            # This task's block of the output: its rows and columns.
            var rows = m_len if by_columns else count
            var cols = count if by_columns else n_len
            var a_at = a if by_columns else a.unsafe_offset(
                first * (xs[0] if trans_a == _NO_TRANS else 1)
            )
            var b_at = b.unsafe_offset(first * b_n) if by_columns else b
            var c_at = first if by_columns else first * n_len
            var d_at = d.unsafe_offset(first if by_columns else 0)
            comptime if dtype == DType.float32:
                if has_bias:
                    fill_rows(c.unsafe_offset(c_at), d_at, rows, cols, n_len)
                sgemm(_ROW_MAJOR, trans_a, trans_b, c_int(rows), c_int(cols),
                      c_int(k_len), Float32(1.0), a_at, c_int(lda), b_at,
                      c_int(ldb), beta, c.unsafe_offset(c_at),
                      c_int(n_len))
            else:
                # float32 sums in a block of the task's own, then rounded.
                var sums = unsafe_alloc[Float32](rows * cols)
                if has_bias:
                    fill_sums(sums, d_at, rows, cols)
                sgemm(_ROW_MAJOR, trans_a, trans_b, c_int(rows), c_int(cols),
                      c_int(k_len), Float32(1.0), a_at, c_int(lda), b_at,
                      c_int(ldb), beta, sums, c_int(cols))
                store_rounded[dtype](sums, c.unsafe_offset(c_at), rows, cols, n_len)
                sums.unsafe_free()

        parallelize(slice, tasks)
        _ = lib^
