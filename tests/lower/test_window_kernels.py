"""The shipped im2col and col2im kernels, and the pixel windows of a
channels-last image (kernels/mojo_windows), against torch's unfold and fold.

Every path of the kernels in one MAX graph (one compile): vector runs
(rows of 16 values or more), a whole shifted plane ("same" padding, stride
1), short rows value by value, strides, dilations, a channels-last input,
both output layouts, and images whose windows read only padding in places.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from max import driver
from max.dtype import DType
from max.graph import DeviceRef, Graph, TensorType

from torch_max_backend.kernels.library import SHIPPED, WINDOWS, custom
from torch_max_backend.runtime import session

# name: (input [N, C, H, W], kernel, stride, padding, dilation)
CASES = {
    "same 3x3 at 28x28": ((2, 3, 28, 28), 3, 1, 1, 1),
    "same 3x3 at 7x7": ((2, 4, 7, 7), 3, 1, 1, 1),
    "same 3x3 at 4x4": ((2, 5, 4, 4), 3, 1, 1, 1),
    "valid 3x3 at 21x20": ((1, 2, 21, 20), 3, 1, 0, 1),
    "1x1 at 12x12": ((2, 3, 12, 12), 1, 1, 0, 1),
    "7x7 stride 2 at 30x30": ((2, 3, 30, 30), 7, 2, 3, 1),
    "dilated 3x3 at 10x10": ((1, 3, 10, 10), 3, 1, 2, 2),
    "padding wider than the kernel": ((1, 2, 5, 6), 3, 1, 4, 1),
    "3x3 stride 2 at 9x9": ((2, 3, 9, 9), 3, 2, 1, 1),
}


def _parameters(kernel: int, stride: int, padding: int, dilation: int) -> dict:
    return {
        "kh": kernel,
        "kw": kernel,
        "sh": stride,
        "sw": stride,
        "ph": padding,
        "pw": padding,
        "dh": dilation,
        "dw": dilation,
    }


def _out_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _expected_windows(x: torch.Tensor, kernel, stride, padding, dilation):
    n, c, h, w = x.shape
    out = [_out_size(s, kernel, stride, padding, dilation) for s in (h, w)]
    cols = F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)
    return cols.reshape(n, c * kernel * kernel, *out)


@pytest.fixture(scope="module")
def results() -> dict:
    """Every case's kernel outputs and inputs, from one compiled graph."""
    generator = torch.Generator().manual_seed(0)
    cpu = DeviceRef.CPU()
    inputs, types, calls = [], [], []
    for name, (shape, kernel, stride, padding, dilation) in CASES.items():
        n, c, h, w = shape
        image = torch.randn(shape, generator=generator)
        out = [_out_size(s, kernel, stride, padding, dilation) for s in (h, w)]
        rows = c * kernel * kernel
        grads = torch.randn((n, rows, *out), generator=generator)
        for tensor in (image, image.permute(0, 2, 3, 1), grads, grads.transpose(0, 1)):
            inputs.append(tensor.contiguous())
            types.append(TensorType(DType.float32, list(tensor.shape), cpu))
        calls.append((name, shape, rows, out))
    with Graph("window_kernels", input_types=types) as graph:
        outputs = []
        for index, (name, shape, rows, out) in enumerate(calls):
            image, image_last, grads, grads_inner = graph.inputs[
                4 * index : 4 * index + 4
            ]
            params = _parameters(*CASES[name][1:])
            n = shape[0]
            for value, last, inner in (
                (image, False, False),
                (image, False, True),
                (image_last, True, True),
            ):
                shape_out = [rows, n, *out] if inner else [n, rows, *out]
                (cols,) = custom(
                    SHIPPED,
                    "torch_max_backend_im2col",
                    [value.tensor],
                    [TensorType(DType.float32, shape_out, cpu)],
                    cpu,
                    parameters={**params, "channels_last": last, "batch_inner": inner},
                )
                outputs.append(cols)
            for value, inner in ((grads, False), (grads_inner, True)):
                (summed,) = custom(
                    SHIPPED,
                    "torch_max_backend_col2im",
                    [value.tensor],
                    [TensorType(DType.float32, list(shape), cpu)],
                    cpu,
                    parameters={**params, "batch_inner": inner},
                )
                outputs.append(summed)
            (pixels,) = custom(
                WINDOWS,
                "torch_max_backend_pixel_windows",
                [image_last.tensor],
                [TensorType(DType.float32, [n, *out, rows], cpu)],
                cpu,
                parameters=params,
            )
            outputs.append(pixels)
        graph.output(*outputs)
    model = session.session_for(torch.device("cpu")).load(graph)
    buffers = [driver.Buffer.from_numpy(t.numpy()) for t in inputs]
    got = [torch.from_numpy(np.asarray(r.to_numpy())) for r in model.execute(*buffers)]
    by_case = {}
    for index, (name, *_rest) in enumerate(calls):
        by_case[name] = (
            inputs[4 * index],
            inputs[4 * index + 2],
            got[6 * index : 6 * index + 6],
        )
    return by_case


@pytest.mark.parametrize("name", list(CASES))
def test_im2col_writes_torch_unfold_windows_in_every_layout(results, name):
    image, _, got = results[name]
    kernel, stride, padding, dilation = CASES[name][1:]
    want = _expected_windows(image, kernel, stride, padding, dilation)
    torch.testing.assert_close(got[0], want, rtol=0, atol=0)
    inner = want.transpose(0, 1)  # [C * kh * kw, N, out_h, out_w]
    torch.testing.assert_close(got[1], inner, rtol=0, atol=0)
    torch.testing.assert_close(got[2], inner, rtol=0, atol=0)


@pytest.mark.parametrize("name", list(CASES))
def test_col2im_sums_windows_back_as_torch_fold(results, name):
    image, grads, got = results[name]
    kernel, stride, padding, dilation = CASES[name][1:]
    n, rows = grads.shape[:2]
    want = F.fold(
        grads.reshape(n, rows, -1),
        image.shape[2:],
        kernel,
        dilation=dilation,
        padding=padding,
        stride=stride,
    )
    torch.testing.assert_close(got[3], want)
    torch.testing.assert_close(got[4], want)


@pytest.mark.parametrize("name", list(CASES))
def test_pixel_windows_are_unfold_windows_a_pixel_a_row(results, name):
    image, _, got = results[name]
    kernel, stride, padding, dilation = CASES[name][1:]
    want = _expected_windows(image, kernel, stride, padding, dilation)
    n, channels = image.shape[:2]
    out = want.shape[2:]
    # [N, C, kh, kw, out_h, out_w] -> [N, out_h, out_w, kh, kw, C]
    want = want.reshape(n, channels, kernel, kernel, *out).permute(0, 4, 5, 2, 3, 1)
    torch.testing.assert_close(got[5], want.reshape(n, *out, -1), rtol=0, atol=0)
