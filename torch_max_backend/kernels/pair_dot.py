"""Whether this CPU has the bfloat16 pair dot product (AVX512-BF16's
``vdpbf16ps``) that our paired product kernel (kernels/mojo_paired) is built
on. Without it the kernel still compiles, over float32 multiply-adds, no
faster than MAX's matmul, so the lowering offers it only where the CPU has
the instruction."""

from __future__ import annotations

from ..storage.bundle import host_cpu

KERNEL = "torch_max_backend_paired_matmul"


def has_pair_dot() -> bool:
    """Whether Linux reports the CPU's ``avx512_bf16`` flag."""
    return "avx512_bf16" in host_cpu()[1]
