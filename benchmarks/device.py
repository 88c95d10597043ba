"""Where a benchmark's models run: ``--device cpu`` (the default) or
``--device cuda``, an NVIDIA GPU.

On a GPU, PyTorch's and MAX's work is asynchronous: a clock read while
kernels are still queued would time their launch, not their run, so every
clock is read after ``synchronize``. Figures that are facts of the CPU (the
memory-bandwidth bound, product timings, OpenMP thread advice) are kept for
``cpu`` and left out ("-") for ``cuda``. A GPU run's docs section goes
between markers of its own, after the CPU vendors' sections, which it leaves
alone.
"""

from __future__ import annotations

import argparse
from typing import Any

DEVICES = ("cpu", "cuda")
# The label of a GPU run's docs section: its markers say "on GPU", its
# heading names the GPU itself.
GPU_LABEL = "GPU"


def add_argument(parser: argparse.ArgumentParser) -> None:
    """``--device``, the one option both benchmarks share."""
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="cpu",
        help="where the models, inputs and optimizer state live (default cpu)",
    )


def child_args(device: str) -> list[str]:
    """A child's ``--device``: nothing for cpu, so that its command stays as it was."""
    return [] if device == "cpu" else ["--device", device]


def check_available(parser: argparse.ArgumentParser, device: str) -> None:
    """Refuse ``--device cuda`` on a machine where PyTorch sees no GPU."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: PyTorch sees no CUDA GPU here")


def synchronize(device: str) -> None:
    """Wait for the device's queued work, before a clock is read."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def gpu_line(m: dict[str, Any]) -> str:
    """``NVIDIA H200, 139.8 GiB`` (figures without the memory: the name)."""
    gpu = m.get("gpu") or "no GPU"
    memory = m.get("gpu_memory_gib")
    return gpu if memory is None else f"{gpu}, {memory} GiB"


def section_label(m: dict[str, Any], device: str) -> str:
    """The label in a docs section's markers: the CPU vendor, or "GPU"."""
    from benchmarks.docs_sections import vendor_label

    return GPU_LABEL if device == "cuda" else vendor_label(m)


def heading_name(m: dict[str, Any], device: str) -> str:
    """What a section's heading says it ran on: the CPU vendor, or the GPU."""
    from benchmarks.docs_sections import vendor_label

    return f"GPU ({m.get('gpu') or 'unknown'})" if device == "cuda" else vendor_label(m)
