"""The one list of op families: importing a family registers its lowerings.

Entry points that read the registry (the backend, ``explain``, the exporter,
the CLI's op table) call ``register_families()`` first; nothing else imports
the families, so importing ``torch_max_backend`` registers nothing.
"""

from __future__ import annotations

import importlib
import threading

import torch

# Each names a module of ``torch_max_backend.lower.ops``.
FAMILIES: tuple[str, ...] = (
    "activation",
    "arg_reduction",
    "attention",
    "avg_pooling",
    "batch_norm_training",
    "convolution",
    "convolution_backward",
    "creation",
    "cumulative",
    "device_attention",
    "division",
    "elementwise",
    "embedding",
    "float_functions",
    "foreach",
    "grid_sampling_backward",
    "grouped_products",
    "histogram",
    "indexing",
    "layer_backward",
    "linalg",
    "logic",
    "loss_backward",
    "max_pooling",
    "normalization",
    "order_statistics",
    "padding",
    "pooling_backward",
    "random",
    "rearrange",
    "reduction",
    "resampling",
    "scatter",
    "shape",
    "sorting",
    "special_functions",
    "symbolic",
    "trigonometry",
    "upsampling",
    "view_updates",
)

_LOCK = threading.Lock()
_registered = False
# The first failure, raised again at every later call: importing the family
# afresh would meet its own earlier registrations ("registered twice") and
# hide the cause.
_failure: RuntimeError | None = None


def register_families() -> None:
    """Register every family's lowerings, once per process."""
    global _registered, _failure
    if _registered:
        return
    with _LOCK:
        if _failure is not None:
            raise _failure
        if not _registered:
            for family in FAMILIES:
                try:
                    importlib.import_module(f"{__package__}.ops.{family}")
                except Exception as e:
                    _failure = RuntimeError(
                        f"torch-max-backend could not register its {family!r} "
                        f"lowerings (torch {torch.__version__}): "
                        f"{type(e).__name__}: {e}"
                    )
                    raise _failure from e
            _registered = True
