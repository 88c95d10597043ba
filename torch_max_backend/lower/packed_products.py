"""Products whose weight the vendor BLAS packed once: frozen weights.

With ``frozen_weights`` (settings.py) an inference graph's weights are
promised unchanged between calls except through torch's own ops, so a
float32 product on the CPU whose weight is a graph input may read it packed
by MKL (``cblas_sgemm_pack``) instead of as stored: our call path packs the
weight when it first sees it, again whenever it changes (runtime/
packed_weights.py), and hands the packed copy to the graph as an input of
its own (builder/planning.py); the kernel (kernels/mojo_vendor/
vendor_packed_matmul.mojo) calls ``cblas_sgemm_compute`` over it. The
strategy is timed against the others like any product's
(product_choice.py). Under autocast the graph casts each float32 weight to
bfloat16 (or float16) at every call; such a weight is cast once, with
torch's rounding, when it is packed, and the graph's cast is left unused.
"""

from __future__ import annotations

import torch
from max.graph import TensorType, TensorValue

from ..dtypes import dtype_name
from ..kernels import vendor_blas, weight_packing
from ..kernels.library import custom
from ..kernels.weight_packing import PackSpec, parts_for
from .context import current
from .kit import fake_tensor, is_static
from .product_kernels import (
    _cpu_float32_static,
    _left_index,
    _operands,
    _swaps_two_dims,
    stored_rows,
    vendor_product,
)

# Set in a GraphModule's meta (``gm.meta[FROZEN_WEIGHTS] = True``) for an
# inference graph compiled with frozen weights: only its products may pack.
FROZEN_WEIGHTS = "torch_max_backend_frozen_weights"


def mark_frozen(gm: torch.fx.GraphModule, kind: str, frozen_weights: bool) -> None:
    """Let ``gm``'s products pack their weights where it is an inference
    graph (AOTAutograd's kind) compiled with ``frozen_weights``: a training
    step's graphs read weights its update changes at every step."""
    if kind == "inference" and frozen_weights:
        gm.meta[FROZEN_WEIGHTS] = True


# A cast that only changes a tensor's dtype: autocast's of a parameter.
_CASTS = (torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default)


def _cast_source(node: torch.fx.Node) -> torch.fx.Node | None:
    """The float32 tensor that ``node`` converts to bfloat16 or float16 and
    does nothing else to (device, layout and memory format kept); else None."""
    if node.op != "call_function" or node.target not in _CASTS:
        return None
    if set(node.kwargs) - {"dtype"}:  # _to_copy's other keywords
        return None
    source = node.args[0]
    if not isinstance(source, torch.fx.Node):
        return None
    meta, out = source.meta.get("val"), node.meta.get("val")
    if not isinstance(meta, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None
    if meta.dtype != torch.float32 or out.dtype not in (torch.bfloat16, torch.float16):
        return None
    return source


def _weight_input(node: torch.fx.Node) -> tuple[torch.fx.Node, bool, str] | None:
    """The graph input a product reads as its weight, whole and contiguous,
    whether it is stored [N, K] (a Linear's, read transposed), and the type
    it is stored in (float32 where the graph casts it: autocast); None for a
    weight computed in the graph."""
    _, weight = _operands(node)
    stored = stored_rows(weight)
    source, weight_nk = (stored, True) if stored is not None else (weight, False)
    if not isinstance(source, torch.fx.Node):
        return None
    cast = _cast_source(source)
    if cast is not None:
        source = cast
    if source.op != "placeholder":
        return None
    meta = source.meta.get("val")
    if not isinstance(meta, torch.Tensor) or meta.dim() != 2:
        return None
    if not meta.is_contiguous():
        return None
    return source, weight_nk, dtype_name(meta.dtype)


def packed_fits(node: torch.fx.Node) -> str | None:
    """float32 (or bfloat16, float16) rows, a static count, times a weight that is a graph input (or autocast's cast of one), on the CPU, in an inference graph compiled with frozen_weights, where the vendor BLAS packs such weights (MKL's cblas_sgemm_pack, cblas_gemm_bf16bf16f32_pack); chosen by measurement or by product_strategy."""
    gm = node.graph.owning_module
    if gm is None or not gm.meta.get(FROZEN_WEIGHTS):
        return "weights not frozen (frozen_weights, inference graphs)"
    rows, weight_node = _operands(node)
    if not weight_packing.packs(dtype_name(rows.dtype)):
        return f"no vendor BLAS that packs {dtype_name(rows.dtype)} weights"
    weight = fake_tensor(weight_node)
    unfit = _cpu_float32_static(rows, weight, rows.dtype)
    if unfit is not None:
        return unfit
    if not is_static(rows.shape) or rows.shape[0] == 0 or rows.shape[1] == 0:
        return "a symbolic or empty number of rows, or an empty sum"
    left = node.args[_left_index(node)]
    if isinstance(left, torch.fx.Node) and _swaps_two_dims(left):
        return "rows read transposed"
    if _weight_input(node) is None:
        return "a weight that is not a graph input"
    return None


def packed_weight(node: torch.fx.Node) -> tuple[torch.fx.Node, PackSpec]:
    """The graph input a packed product reads and how it is packed."""
    found = _weight_input(node)
    assert found is not None  # packed_fits checked
    source, weight_nk, stored = found
    rows, _ = _operands(node)
    first, second = (int(d) for d in source.meta["val"].shape)
    k, n = (second, first) if weight_nk else (first, second)
    spec = PackSpec(
        int(rows.shape[0]),
        k,
        n,
        weight_nk,
        parts_for(n),
        dtype_name(rows.dtype),
        stored,
    )
    return source, spec


def packed_product(
    rows: TensorValue, mat2: TensorValue, bias: TensorValue | None = None
) -> TensorValue:
    """``rows @ mat2 (+ bias)`` over the weight packed for this product; the
    bias joins the float32 sums, as vendor_product's does."""
    node = current().node
    packed = current().packed.get(node)
    if packed is None:
        # Planned without it (a timing that failed at planning and not at
        # the build): the weight as stored, through the vendor's own call.
        return vendor_product(rows, mat2, bias)
    if bias is None:
        bias = vendor_blas.no_bias(rows.dtype, rows.device)
    _, spec = packed_weight(node)
    found = vendor_blas.vendor_blas()
    assert found is not None  # packed_fits checked
    (product,) = custom(
        vendor_blas.VENDOR_KERNELS,
        "torch_max_backend_vendor_packed_matmul",
        [rows, packed, bias],
        [TensorType(rows.dtype, [rows.shape[0], mat2.shape[1]], rows.device)],
        rows.device,
        parameters={"parts": spec.parts, "library": found.path},
    )
    return product
