"""Training through convolutions, normalizations and embeddings.

Two training steps (a forward and a backward MAX graph each) compared with
eager autograd, and a check that the backward ATen graphs really hold the
lowered backward ops rather than decompositions of them.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torch_max_backend.backend as backend_module
from torch_max_backend import UnsupportedOpsError, max_backend
from torch_max_backend.lower.builder import build_graph

from .family_check import check_family
from .helpers import check_training_step

aten = torch.ops.aten

# Refusals are checked as errors, not as fallbacks to PyTorch.
STRICT = {"strict": True}


@pytest.fixture
def aten_ops(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[object]]:
    """The ATen ops of every graph handed to MAX, by kind (forward, backward)."""
    seen: dict[str, set[object]] = defaultdict(set)
    original = backend_module.compile_aten_graph

    def recording(gm, example_inputs, *, settings, kind):
        seen[kind].update(n.target for n in gm.graph.nodes if n.op == "call_function")
        return original(gm, example_inputs, settings=settings, kind=kind)

    monkeypatch.setattr(backend_module, "compile_aten_graph", recording)
    return seen


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        # Stride, padding and dilation per axis; the last padded row unread.
        self.strided = torch.nn.Conv2d(
            8, 8, 3, stride=2, padding=(1, 2), dilation=(1, 2), bias=False
        )
        self.grouped = torch.nn.Conv2d(8, 8, 3, stride=(2, 1), padding=2, groups=4)
        self.bn = torch.nn.BatchNorm2d(8)
        self.gn = torch.nn.GroupNorm(2, 8)
        self.inorm = torch.nn.InstanceNorm2d(8, affine=True)  # no running stats
        self.conv1d = torch.nn.Conv1d(4, 6, 3, padding=1)
        self.conv1d_strided = torch.nn.Conv1d(6, 6, 3, stride=2, dilation=2, groups=3)
        # Padding larger than the kernel reaches: the input grad is a crop.
        self.pointwise = torch.nn.Conv1d(6, 6, 1, padding=1, bias=False)
        self.ln = torch.nn.LayerNorm(6)

    def forward(self, x: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn(self.conv(x)))
        h = torch.tanh(self.gn(self.strided(h)))
        h = self.inorm(self.grouped(h))
        s = self.pointwise(self.conv1d_strided(self.conv1d(seq)))
        s = self.ln(s.transpose(1, 2))
        return (h * h.detach().sign()).mean() + torch.sigmoid(s).pow(2).mean()


def test_conv_and_norm_training_matches_eager(max_calls, aten_ops, graph_texts):
    torch.manual_seed(0)
    model = ConvNet()
    check_training_step(model, torch.randn(2, 3, 8, 8), torch.randn(2, 4, 11))
    assert max_calls.of("forward") >= 1
    assert max_calls.of("backward") >= 1
    # The ungrouped convolutions' gradients went through their windows'
    # matrix (lower/conv_columns.py): the input's by col2im, the weight's
    # from windows laid out with the batch inside each row.
    (backward,) = [t for t in graph_texts() if "torch_max_backend_col2im" in t]
    assert "batch_inner = true" in backward
    assert aten._native_batch_norm_legit.no_stats in aten_ops["forward"]
    for op in (
        aten.convolution_backward.default,
        aten.native_layer_norm_backward.default,
        aten.native_group_norm_backward.default,
    ):
        assert op in aten_ops["backward"], op


class WeightNormConv(torch.nn.Module):
    """wav2vec2's positional convolution: a grouped Conv1d under weight_norm(dim=2)."""

    def __init__(self) -> None:
        super().__init__()
        conv = torch.nn.Conv1d(8, 8, kernel_size=5, padding=2, groups=2)
        self.conv = torch.nn.utils.parametrizations.weight_norm(conv, dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.conv(x)).pow(2).mean()


def test_weight_norm_training_matches_eager(max_calls, aten_ops):
    torch.manual_seed(0)
    check_training_step(WeightNormConv(), torch.randn(2, 8, 16))
    assert max_calls.of("forward") >= 1
    assert max_calls.of("backward") >= 1
    assert aten.linalg_vector_norm.default in aten_ops["forward"]
    assert aten._weight_norm_interface_backward.default in aten_ops["backward"]


class EmbeddingNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 6, padding_idx=0)
        self.embed_freq = torch.nn.Embedding(10, 6, scale_grad_by_freq=True)
        self.bag_sum = torch.nn.EmbeddingBag(
            10, 6, mode="sum", include_last_offset=True
        )
        self.bag_mean = torch.nn.EmbeddingBag(10, 6, mode="mean", padding_idx=2)
        self.bag_max = torch.nn.EmbeddingBag(10, 6, mode="max")

    def forward(
        self,
        ids: torch.Tensor,
        flat: torch.Tensor,
        offsets: torch.Tensor,
        last: torch.Tensor,
        weights: torch.Tensor,
    ) -> torch.Tensor:
        tokens = self.embed(ids) + self.embed_freq(ids)
        bags = (
            self.bag_sum(flat, last, per_sample_weights=weights)
            + self.bag_mean(flat, offsets)
            + self.bag_max(flat, offsets)
        )
        return torch.tanh(tokens).pow(2).sum() + torch.tanh(bags).pow(3).sum()


def test_embedding_training_matches_eager(max_calls, aten_ops):
    torch.manual_seed(0)
    model = EmbeddingNet()
    ids = torch.tensor([[0, 3, 3, 7, 0], [1, 3, 9, 0, 2]])
    # Bag 1 is empty; index 2 is the mean bag's padding, 3 repeats.
    flat = torch.tensor([3, 2, 5, 3, 2, 8, 1, 3])
    offsets = torch.tensor([0, 2, 2, 5])
    last = torch.tensor([0, 2, 2, 5, 8])  # include_last_offset
    check_training_step(model, ids, flat, offsets, last, torch.rand(8))
    assert max_calls.of("forward") >= 1
    assert max_calls.of("backward") >= 1
    assert aten._embedding_bag.default in aten_ops["forward"]
    for op in (
        aten.embedding_dense_backward.default,
        aten._embedding_bag_backward.default,
        aten._embedding_bag_per_sample_weights_backward.default,
    ):
        assert op in aten_ops["backward"], op


def test_embedding_bag_grad_by_frequency_is_refused():
    # torch's CPU kernel scales by the wrong count: refused, never computed
    # differently. The check runs before anything compiles.
    bag = torch.nn.EmbeddingBag(10, 4, scale_grad_by_freq=True)
    ids, offsets = torch.tensor([3, 1, 1]), torch.tensor([0, 1])
    with pytest.raises(UnsupportedOpsError) as info:
        torch.compile(
            lambda i, o: bag(i, o).sum(), backend=max_backend, options=STRICT
        )(ids, offsets)
    assert "scale_grad_by_freq" in str(info.value)


# Lowerings no core OpInfo case reaches (backward, optimizer and non-core
# overloads): training, model and hand-written tests exercise them.
OUTSIDE_OPINFO = (
    "aten.native_group_norm_backward.default",
    "aten.native_layer_norm_backward.default",
)


def test_layer_backward_lowerings_build_for_every_opinfo_case():
    check_family("layer_backward", OUTSIDE_OPINFO)


# (input shape, out channels, kernel, stride, padding, dilation, groups, dtype):
# depthwise as ConvNeXt (7x7) and MobileNet (3x3, strided) have them, a
# channel multiplier of 2 with dilation and uneven strides, a 1-d depthwise
# one, bfloat16, and groups of two input channels (the windows' product).
GROUPED_GRADS = [
    ((2, 8, 6, 6), 8, (7, 7), (1, 1), (3, 3), (1, 1), 8, torch.float32),
    ((2, 6, 9, 9), 6, (3, 3), (2, 2), (1, 1), (1, 1), 6, torch.float32),
    ((1, 4, 11, 10), 8, (3, 2), (2, 1), (2, 0), (2, 3), 4, torch.float32),
    ((2, 4, 13), 4, (5,), (1,), (2,), (1,), 4, torch.float32),
    ((2, 8, 6, 6), 8, (3, 3), (1, 1), (1, 1), (1, 1), 8, torch.bfloat16),
    ((2, 8, 7, 7), 12, (3, 3), (2, 2), (1, 1), (1, 1), 4, torch.float32),
]


def _grouped_operands(case: tuple) -> list[torch.Tensor]:
    shape, out_channels, kernel, stride, padding, dilation, groups, dtype = case
    x = torch.randn(shape, dtype=dtype)
    w = torch.randn(out_channels, shape[1] // groups, *kernel, dtype=dtype)
    y = F.conv2d if len(kernel) == 2 else F.conv1d
    out = y(x, w, None, stride, padding, dilation, groups)
    return [torch.randn_like(out), x, w]


def _grouped_grads(*tensors: torch.Tensor) -> list[torch.Tensor]:
    grads = []
    for i, case in enumerate(GROUPED_GRADS):
        _, out_channels, _, stride, padding, dilation, groups, _ = case
        g, x, w = tensors[3 * i : 3 * i + 3]
        grads += aten.convolution_backward(
            g, x, w, [out_channels], stride, padding, dilation, False,
            [0] * len(stride), groups, [True, True, True],
        )  # fmt: skip
    return grads


def test_grouped_convolution_gradients_match_eager(max_calls, graph_texts):
    torch.manual_seed(0)
    tensors = [t for case in GROUPED_GRADS for t in _grouped_operands(case)]
    compiled = torch.compile(_grouped_grads, backend=max_backend, options=STRICT)
    for got, want in zip(compiled(*tensors), _grouped_grads(*tensors), strict=True):
        tolerance = {"atol": 3e-2, "rtol": 2e-2} if want.dtype == torch.bfloat16 else {}
        torch.testing.assert_close(got, want, **tolerance)
    assert max_calls.of("inference") == 1
    (text,) = graph_texts()
    # Every depthwise weight gradient (one input channel per group) is one
    # kernel: over channels-last images with one output channel a group,
    # else channels-first (the multiplier of 2); the last case's windows
    # come from im2col, not strided slices.
    assert text.count('"torch_max_backend_depthwise_weight_grad_last"') == 4
    assert text.count('"torch_max_backend_depthwise_weight_grad"') == 1
    assert "torch_max_backend_im2col" in text
    assert "rmo.slice" not in text


# (input shape, normalized dims, affine, dtype): a row longer than the
# kernel's vectors with a tail, two normalized dims without weight or bias,
# and bfloat16.
LAYER_NORM_GRADS = [
    ((3, 5, 40), 1, True, torch.float32),
    ((2, 3, 4, 10), 2, False, torch.float32),
    ((4, 24), 1, True, torch.bfloat16),
]


def _layer_norm_operands(case: tuple) -> list[torch.Tensor | None]:
    shape, dims, affine, dtype = case
    x = torch.randn(shape, dtype=dtype) * 2 + 0.5
    normalized = list(shape[-dims:])
    weight = torch.randn(normalized, dtype=dtype) if affine else None
    bias = torch.randn(normalized, dtype=dtype) if affine else None
    _, mean, rstd = aten.native_layer_norm(x, normalized, weight, bias, 1e-5)
    return [torch.randn_like(x), x, mean, rstd, weight, bias]


def _layer_norm_grads(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    grads = []
    for i, (shape, dims, affine, _) in enumerate(LAYER_NORM_GRADS):
        g, x, mean, rstd, weight, bias = tensors[6 * i : 6 * i + 6]
        mask = [True, affine, affine]
        grads += aten.native_layer_norm_backward(
            g, x, list(shape[-dims:]), mean, rstd, weight, bias, mask
        )
    return grads


def test_layer_norm_gradients_are_one_kernel_and_match_eager(max_calls, graph_texts):
    torch.manual_seed(0)
    tensors = [t for case in LAYER_NORM_GRADS for t in _layer_norm_operands(case)]
    compiled = torch.compile(_layer_norm_grads, backend=max_backend, options=STRICT)
    got, want = compiled(*tensors), _layer_norm_grads(*tensors)
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None
            continue
        bf16 = w.dtype == torch.bfloat16
        tolerance = {"atol": 3e-2, "rtol": 2e-2} if bf16 else {}
        torch.testing.assert_close(g, w, **tolerance)
    assert max_calls.of("inference") == 1
    (text,) = graph_texts()
    assert text.count('"torch_max_backend_layer_norm_backward"') == 3
    assert "rmo.mo.reduce" not in text


@pytest.mark.parametrize(("size", "by_columns"), [(28, True), (56, True), (64, False)])
def test_stride_one_input_gradient_takes_col2im_up_to_56x56(size, by_columns):
    """A stride-1 convolution's input gradient is built by col2im up to 56x56
    output pixels (faster than MAX's conv2d there, docs/benchmarks.md
    "Training steps"), by MAX's conv2d over larger images. Built, not
    compiled: the graph's text names the kernel that computes it."""

    def input_grad(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor):
        return aten.convolution_backward(
            grad,
            x,
            w,
            None,
            [1, 1],
            [1, 1],
            [1, 1],
            False,
            [0, 0],
            1,
            [True, False, False],
        )[0]

    image = torch.randn(1, 4, size, size)
    gm = make_fx(input_grad, tracing_mode="fake")(image, image, torch.randn(4, 4, 3, 3))
    text = str(build_graph(gm).graph)
    assert ("torch_max_backend_col2im" in text) == by_columns
    assert ("mo.conv" in text) != by_columns
