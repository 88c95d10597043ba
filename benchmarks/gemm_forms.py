"""``python -m benchmarks.gemm --forms``: each shape's product forms timed as
``product_strategy="auto"`` times them (kernels/product_timing.py), and the
report of which was fastest and how fast it read its weight."""

from __future__ import annotations

from typing import Any

from torch_max_backend.lower.product_kernels import SKINNY_MAX_ROWS


def forms_child(
    shapes: list[tuple[int, int, int]], streamed: bool = False
) -> dict[str, Any]:
    """Each (M, K, N) shape's forms as the lowering times them
    (product_strategy auto), the weight in the cache or (``streamed``) read
    from memory."""
    from torch_max_backend.kernels.product_timing import time_forms
    from torch_max_backend.kernels.vendor_blas import vendor_blas
    from torch_max_backend.pipeline.compiling import settle_timing
    from torch_max_backend.settings import Settings

    # Timed as the backend times them, by the same settings.
    settle_timing(Settings.resolve())

    figures = {}
    for m, k, n in shapes:
        for weight_nk in (True, False):
            forms = ["skinny", "matmul"] if m <= SKINNY_MAX_ROWS else ["matmul"]
            if m == 1 and weight_nk:
                forms.insert(0, "row_sums")
            if m <= SKINNY_MAX_ROWS and not weight_nk:
                forms.insert(1, "streamed")
            if vendor_blas() is not None:
                forms.append("vendor")
            times = time_forms(m, k, n, weight_nk, forms, streamed)
            figures[f"{m}x{k}x{n} {'[N,K]' if weight_nk else '[K,N]'}"] = times
    return figures


FORMS_HEADERS = ["M x K x N weight", "fastest", "its GB/s", "us per form"]


def forms_rows(timed: dict[str, dict[str, float]]) -> list[list[str]]:
    """A row per shape: the fastest form, the rate at which it read the
    weight, and every form's median."""
    rows = []
    for shape, times in timed.items():
        best = min(times, key=times.__getitem__)
        _, k, n = (int(v) for v in shape.split()[0].split("x"))
        rows.append(
            [
                shape,
                best,
                f"{4 * k * n / times[best] / 1e3:.1f}",
                ", ".join(f"{form} {us:.0f}" for form, us in times.items()),
            ]
        )
    return rows
