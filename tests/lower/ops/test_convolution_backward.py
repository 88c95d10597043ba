"""Convolution gradients in 1-d, 2-d and 3-d, plain and transposed, against
eager autograd's, and a check that training graphs of transposed and 3-d
convolutions keep their backward on MAX."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import explain, max_backend

from .family_check import check_family

aten = torch.ops.aten

# (input shape, weight shape, stride, padding, dilation, output padding,
# groups, transposed, output mask, dtype). Transposed ones: a decoder's
# upsampling with output padding, groups with uneven strides and dilation,
# 1-d, an output padding a stride of 1 allows through dilation (the input
# gradient's plain convolution has a row to crop), 3-d with and without
# groups, and bfloat16. Plain 3-d ones: strided, grouped with uneven
# parameters, depthwise, and the input's gradient alone.
CASES = [
    ((2, 4, 5, 5), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1, True),
    ((2, 4, 5, 4), (4, 3, 3, 2), (2, 1), (0, 1), (1, 2), (1, 0), 2, True),
    ((2, 4, 7), (4, 3, 3), (2,), (0,), (1,), (0,), 1, True),
    ((1, 3, 4, 4), (3, 2, 3, 3), (1, 1), (1, 1), (2, 2), (1, 1), 1, True),
    ((2, 4, 3, 4, 4), (4, 3, 3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1, True),
    ((1, 4, 3, 3, 2), (4, 2, 2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), (0, 0, 0), 2, True),
    ((2, 3, 6, 6, 6), (4, 3, 3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), (0, 0, 0), 1, False),
    ((1, 4, 5, 6, 5), (6, 2, 3, 1, 2), (1, 2, 1), (1, 0, 1), (2, 1, 1), (0, 0, 0), 2, False),
    ((2, 4, 5, 5, 5), (4, 1, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (0, 0, 0), 4, False),
]  # fmt: skip
MASKS = [[True, True, True]] * (len(CASES) - 1) + [[True, False, False]]
DTYPES = [torch.float32] * len(CASES)
# The grouped 2-d transposed case again, in bfloat16.
CASES.append(CASES[1])
MASKS.append([True, True, True])
DTYPES.append(torch.bfloat16)


def _forward(case: tuple, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    _, _, stride, padding, dilation, output_padding, groups, transposed = case
    return aten.convolution(
        x, w, None, stride, padding, dilation, transposed, output_padding, groups
    )


def _operands() -> list[torch.Tensor]:
    tensors = []
    for case, dtype in zip(CASES, DTYPES, strict=True):
        x = torch.randn(case[0], dtype=dtype)
        w = torch.randn(case[1], dtype=dtype)
        tensors += [torch.randn_like(_forward(case, x, w)), x, w]
    return tensors


def _grads(*tensors: torch.Tensor) -> list[torch.Tensor | None]:
    grads: list[torch.Tensor | None] = []
    for i, (case, mask) in enumerate(zip(CASES, MASKS, strict=True)):
        _, _, stride, padding, dilation, output_padding, groups, transposed = case
        g, x, w = tensors[3 * i : 3 * i + 3]
        grads += aten.convolution_backward(
            g, x, w, [g.shape[1]], stride, padding, dilation, transposed,
            output_padding, groups, mask,
        )  # fmt: skip
        if transposed and x.dim() == 5:
            # The 3-d transposed convolution's forward too.
            grads.append(_forward(case, x, w))
    return grads


def test_convolution_gradients_match_eager(max_calls):
    torch.manual_seed(0)
    tensors = _operands()
    compiled = torch.compile(_grads, backend=max_backend, options={"strict": True})
    got, want = compiled(*tensors), _grads(*tensors)
    assert len(got) == len(want)
    for i, (g, e) in enumerate(zip(got, want, strict=True)):
        if e is None:
            assert g is None, f"output {i}"
            continue
        # Sums of up to 216 products: float32 order differences, and
        # bfloat16's rounding of its inputs.
        tolerance = (
            {"atol": 1e-1, "rtol": 2e-2}
            if e.dtype == torch.bfloat16
            else {"atol": 1e-4, "rtol": 1e-4}
        )
        torch.testing.assert_close(g, e, **tolerance, msg=lambda m, i=i: f"{i}: {m}")
    assert max_calls.of("inference") == 1


class _Volumes(torch.nn.Module):
    """A 3-d encoder and decoder with a 1-d and 2-d transposed head: the
    layers a video or medical-imaging model trains."""

    def __init__(self) -> None:
        super().__init__()
        self.down = torch.nn.Conv3d(2, 4, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose3d(
            4, 2, 3, stride=2, padding=1, output_padding=1
        )
        self.up2d = torch.nn.ConvTranspose2d(2, 3, 4, stride=2, padding=1)
        self.up1d = torch.nn.ConvTranspose1d(2, 2, 3, stride=2, groups=2)

    def forward(self, vol: torch.Tensor) -> torch.Tensor:
        y = self.up(F.relu(self.down(vol)))
        plane = self.up2d(y.mean(2))
        line = self.up1d(y.mean((2, 3)))
        return y.square().mean() + plane.mean() + line.mean()


def test_training_graphs_of_transposed_and_3d_convolutions_stay_on_max():
    report = explain(_Volumes(), torch.randn(1, 2, 4, 6, 6), training=True)
    ops = {op.op: op for graph in report.graphs for op in graph.ops}
    assert ops["aten.convolution_backward.default"].count == 4
    assert report.unsupported == {}


def test_convolution_backward_lowerings_build_for_every_opinfo_case():
    check_family("convolution_backward", ("aten.convolution_backward.default",))


class _SameSized(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.conv1d = torch.nn.Conv1d(4, 2, 3, padding=2, dilation=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv(x))
        return y.square().mean() + self.conv1d(y.mean(2)).square().mean()


def test_gradients_over_symbolic_image_sizes_stay_on_max(max_calls):
    # Images whose size changes from step to step: Dynamo makes height and
    # width symbolic, and the window kernels read them at run time. (Layers
    # that keep the size: a backward graph whose saved activations have
    # sizes such as (h - 1) // 2 + 1 runs in PyTorch, since graph inputs
    # take plain symbols only.)
    torch.manual_seed(0)
    model = _SameSized()
    compiled = torch.compile(model, backend=max_backend, options={"strict": True})
    for size in ((9, 12), (14, 7)):
        x = torch.randn(2, 3, *size)
        torch._dynamo.mark_dynamic(x, 2)
        torch._dynamo.mark_dynamic(x, 3)
        model.zero_grad()
        want = model(x)
        want.backward()
        expected = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        got = compiled(x)
        got.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        for p, e in zip(model.parameters(), expected, strict=True):
            torch.testing.assert_close(p.grad, e, rtol=1e-4, atol=1e-5)
    assert max_calls.of("forward") == 2 and max_calls.of("backward") == 2
