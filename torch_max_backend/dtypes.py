"""PyTorch <-> MAX dtype and device correspondence."""

from __future__ import annotations

import torch
from max.dtype import DType
from max.graph import DeviceRef

_TORCH_TO_MAX: dict[torch.dtype, DType] = {
    torch.bool: DType.bool,
    torch.int8: DType.int8,
    torch.int16: DType.int16,
    torch.int32: DType.int32,
    torch.int64: DType.int64,
    torch.uint8: DType.uint8,
    torch.uint16: DType.uint16,
    torch.uint32: DType.uint32,
    torch.uint64: DType.uint64,
    torch.float16: DType.float16,
    torch.bfloat16: DType.bfloat16,
    torch.float32: DType.float32,
    torch.float64: DType.float64,
    torch.float8_e4m3fn: DType.float8_e4m3fn,
    torch.float8_e4m3fnuz: DType.float8_e4m3fnuz,
    torch.float8_e5m2: DType.float8_e5m2,
    torch.float8_e5m2fnuz: DType.float8_e5m2fnuz,
}
_MAX_TO_TORCH = {v: k for k, v in _TORCH_TO_MAX.items()}


def to_max_dtype(dtype: torch.dtype) -> DType:
    try:
        return _TORCH_TO_MAX[dtype]
    except KeyError:
        raise TypeError(f"MAX has no dtype for torch {dtype}") from None


def to_torch_dtype(dtype: DType) -> torch.dtype:
    try:
        return _MAX_TO_TORCH[dtype]
    except KeyError:
        raise TypeError(f"torch has no dtype for MAX {dtype}") from None


def accumulation_dtype(dtype: DType) -> DType:
    """The dtype statistics are computed in: float32 for half precision, as torch's kernels do."""
    return DType.float32 if dtype in (DType.float16, DType.bfloat16) else dtype


def dtype_name(dtype: torch.dtype) -> str:
    """torch's name for ``dtype`` without its module: ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def supported_dtype(dtype: torch.dtype) -> bool:
    return dtype in _TORCH_TO_MAX


def to_device_ref(device: torch.device) -> DeviceRef:
    """The MAX device a torch device maps to: cpu -> CPU, cuda:i -> GPU(i)."""
    if device.type == "cpu":
        return DeviceRef.CPU()
    if device.type == "cuda":
        return DeviceRef.GPU(device.index or 0)
    raise TypeError(
        f"torch-max-backend runs on cpu and cuda devices, not {device} "
        "(MAX exposes NVIDIA and AMD GPUs to PyTorch as 'cuda')"
    )
