"""MAX devices for torch devices, created once per process."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import torch
from max.driver import CPU, Accelerator, Device, accelerator_count


@functools.cache
def _accelerator(index: int) -> Device:
    count = accelerator_count()
    if index >= count:
        raise RuntimeError(
            f"cuda:{index} has no MAX accelerator: MAX sees {count} supported "
            "accelerator(s) here (some older NVIDIA and AMD GPUs are not "
            "supported by MAX); see torch_max_backend.get_accelerators()"
        )
    try:
        return Accelerator(index)
    except Exception as e:
        raise RuntimeError(f"MAX cannot open accelerator {index}: {e}") from e


@functools.cache
def _cpu() -> Device:
    return CPU()


def max_device(device: torch.device) -> Device:
    """The MAX device running tensors of ``device``: cpu -> CPU, cuda:i -> GPU i."""
    if device.type == "cpu":
        return _cpu()
    if device.type == "cuda":
        return _accelerator(device.index if device.index is not None else 0)
    raise RuntimeError(f"torch-max-backend cannot run tensors on {device}")


def get_accelerators() -> Iterator[Device]:
    """The MAX devices usable here: the CPU first, then each supported accelerator.

    ``len(list(get_accelerators())) >= 2`` tells that a GPU can be used.
    """
    yield _cpu()
    for index in range(accelerator_count()):
        yield _accelerator(index)
