"""The one list of op families: importing a family registers its lowerings.

Entry points that read the registry (the backend, ``explain``, the exporter,
the CLI's op table) call ``register_families()`` first; nothing else imports
the families, so importing ``torch_max_backend`` registers nothing.
"""

from __future__ import annotations

import importlib
import threading

# Each names a module of ``torch_max_backend.lower.ops``.
FAMILIES: tuple[str, ...] = (
    "activation",
    "arg_reduction",
    "attention",
    "avg_pooling",
    "convolution",
    "creation",
    "cumulative",
    "device_attention",
    "division",
    "elementwise",
    "embedding",
    "float_functions",
    "foreach",
    "indexing",
    "layer_backward",
    "linalg",
    "logic",
    "loss_backward",
    "max_pooling",
    "normalization",
    "padding",
    "pooling_backward",
    "random",
    "rearrange",
    "reduction",
    "resampling",
    "scatter",
    "shape",
    "sorting",
    "symbolic",
    "trigonometry",
    "view_updates",
)

_LOCK = threading.Lock()
_registered = False


def register_families() -> None:
    """Register every family's lowerings, once per process."""
    global _registered
    if _registered:
        return
    with _LOCK:
        if not _registered:
            for family in FAMILIES:
                importlib.import_module(f"{__package__}.ops.{family}")
            _registered = True
