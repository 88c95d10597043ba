# Products whose weight MKL packed beforehand (`cblas_sgemm_pack`; for
# bfloat16 and float16 `cblas_gemm_bf16bf16f32_pack` and
# `cblas_gemm_f16f16f32_pack`, which sum in float32, each result then
# rounded once, as the vendor kernel beside this one does):
# the weights of a graph compiled with frozen weights, packed once by our
# call path (kernels/weight_packing.py) and handed to the graph as an input.
# MKL's `cblas_sgemm` packs its weight at every call, a pass over it that at
# 64 to 128 rows costs a sixth of the product; `cblas_sgemm_compute` reads
# the packed form instead. The weight is packed in `parts` slices of its
# columns, one a MAX task, each slice's packed bytes starting on a 64-byte
# boundary after the previous slice's, as weight_packing.py lays them out.

import extensibility
from extensibility import InputTensor, OutputTensor
from max.algorithm import parallelize
from max.gpu.host import DeviceContext
from std.ffi import OwnedDLHandle, c_int, c_size_t
from std.math import ceildiv
from std.memory.alloc import unsafe_alloc

from .rounded_rows import bias_beta, fill_rows, fill_sums, store_rounded

comptime _ROW_MAJOR: c_int = 101
comptime _NO_TRANS: c_int = 111
comptime _TRANS: c_int = 112
comptime _PACKED: c_int = 151
comptime _B_MATRIX: c_int = 162
comptime _MKL_SEQUENTIAL: c_int = 1
# A slice's packed bytes are rounded up to this many float32 values.
comptime _ALIGN_VALUES = 16


@extensibility.register("torch_max_backend_vendor_packed_matmul")
struct VendorPackedMatmul:
    """`output[M, N] = x[M, K] @ W` by MKL's `cblas_sgemm_compute` over
    `packed` (bfloat16, float16: MKL's half-precision compute into float32,
    rounded once), W packed for M rows in `parts` slices of its N columns;
    `packed` holds the packed bytes whatever the operands' type. A `bias` of
    N values joins the float32 sums before the one rounding (empty: none)."""

    @staticmethod
    def execute[
        dtype: DType,
        //,
        parts: Int,
        library: StaticString,
        target: StaticString,
    ](
        output: OutputTensor[dtype=dtype, rank=2, ...],
        x: InputTensor[dtype=dtype, rank=2, ...],
        packed: InputTensor[dtype=DType.float32, rank=1, ...],
        bias: InputTensor[dtype=dtype, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_vendor_packed_matmul runs on CPU"
        comptime assert parts >= 1, "a weight is packed in one slice or more"
        comptime assert (
            dtype == DType.float32 or dtype == DType.bfloat16 or dtype == DType.float16
        ), "a packed product is float32, bfloat16 or float16"
        comptime size_name = "cblas_sgemm_pack_get_size" if dtype == DType.float32 else (
            "cblas_gemm_bf16bf16f32_pack_get_size" if dtype == DType.bfloat16
            else "cblas_gemm_f16f16f32_pack_get_size"
        )
        comptime compute_name = "cblas_sgemm_compute" if dtype == DType.float32 else (
            "cblas_gemm_bf16bf16f32_compute" if dtype == DType.bfloat16
            else "cblas_gemm_f16f16f32_compute"
        )
        var m_len = x.dim_size(0)
        var k_len = x.dim_size(1)
        var n_len = output.dim_size(1)
        if m_len == 0 or n_len == 0:
            return
        if output.strides()[1] != 1 or output.strides()[0] != n_len:
            raise Error("torch_max_backend_vendor_packed_matmul: output not dense")
        var beta = bias_beta(bias.dim_size(0), bias.strides()[0], n_len, "torch_max_backend_vendor_packed_matmul")
        var has_bias = beta != 0.0
        var d = bias.unsafe_ptr()
        # x may reach the kernel as a view (MAX folds a transpose into it).
        var xs = x.strides()
        var trans_a = _NO_TRANS
        var lda = xs[0]
        if xs[1] != 1:
            if xs[0] != 1:
                raise Error("torch_max_backend_vendor_packed_matmul: x has no unit stride")
            trans_a = _TRANS
            lda = xs[1]
        if (m_len if trans_a == _NO_TRANS else k_len) == 1:
            lda = k_len if trans_a == _NO_TRANS else m_len
        var lib = OwnedDLHandle(library)
        var compute = lib.get_function[NoneType](compute_name)
        var size_of = lib.get_function[c_size_t](size_name)
        var set_layer = lib.get_function[c_int]("MKL_Set_Threading_Layer")
        _ = set_layer(_MKL_SEQUENTIAL)
        var block = ceildiv(n_len, parts)
        # Where each slice starts, checked against the input's length: a
        # packing laid out otherwise would be read past its end.
        var total = 0
        for p in range(parts):
            var cols = min(n_len, (p + 1) * block) - p * block
            if cols > 0:
                var bytes = Int(size_of(_B_MATRIX, c_int(m_len), c_int(cols), c_int(k_len)))
                total += ceildiv(bytes, 4 * _ALIGN_VALUES) * _ALIGN_VALUES
        if total > packed.dim_size(0):
            raise Error("torch_max_backend_vendor_packed_matmul: packed weight too short")
        var a = x.unsafe_ptr()
        var b = packed.unsafe_ptr()
        var c = output.unsafe_ptr()

        def slice(p: Int) {var}:
            var first = p * block
            var cols = min(n_len, first + block) - first
            if cols <= 0:
                return
            var at = 0
            for q in range(p):
                var q_cols = min(n_len, (q + 1) * block) - q * block
                var bytes = Int(size_of(_B_MATRIX, c_int(m_len), c_int(q_cols), c_int(k_len)))
                at += ceildiv(bytes, 4 * _ALIGN_VALUES) * _ALIGN_VALUES
            comptime if dtype == DType.float32:
                if has_bias:
                    fill_rows(c.unsafe_offset(first), d.unsafe_offset(first), m_len, cols, n_len)
                # sgemm's alpha was applied when the weight was packed.
                compute(_ROW_MAJOR, trans_a, _PACKED, c_int(m_len), c_int(cols),
                        c_int(k_len), a, c_int(lda), b.unsafe_offset(at),
                        c_int(cols), beta, c.unsafe_offset(first), c_int(n_len))
            else:
                # float32 sums in a block of the task's own, then rounded.
                var sums = unsafe_alloc[Float32](m_len * cols)
                if has_bias:
                    fill_sums(sums, d.unsafe_offset(first), m_len, cols)
                compute(_ROW_MAJOR, trans_a, _PACKED, c_int(m_len), c_int(cols),
                        c_int(k_len), Float32(1.0), a, c_int(lda),
                        b.unsafe_offset(at), c_int(cols), beta, sums,
                        c_int(cols))
                store_rounded[dtype](sums, c.unsafe_offset(first), m_len, cols, n_len)
                sums.unsafe_free()

        parallelize(slice, parts)
        _ = lib^
