"""Conv-net activations stay channels-last between MAX ops (lowering/layout.py)."""

from __future__ import annotations

import copy
import re
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import max_backend
from torch_max_backend.lower import conv_choice, conv_kernel

AVX512 = conv_choice.cpu_has_avx512()
TO_LAST = "0, 2, 3, 1"
TO_FIRST = "0, 3, 1, 2"


def live_transposes(text: str) -> Counter[str]:
    """Permutations of the transposes in a MAX graph's text whose result is read.

    Unread ones are dead code that MAX's compiler drops.
    """
    perms = dict(re.findall(r"(%\d+) = mo\.constant <#M\.dense_array<([\d, ]+)>", text))
    counts: Counter[str] = Counter()
    for result, perm_name in re.findall(
        r"(%\d+) = rmo\.mo\.transpose\(%\w+, (%\d+)\)", text
    ):
        if re.search(rf"{result}\b(?! =)", text.split(f"{result} = ", 1)[1]):
            counts[perms[perm_name]] += 1
    return counts


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.scale = torch.nn.Parameter(torch.rand(8, 1, 1) + 0.5)
        self.proj = torch.nn.Conv2d(8, 6, 1)
        self.fc = torch.nn.Linear(6, 4)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)

    def forward(
        self, x: torch.Tensor, extra: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.max_pool2d(F.relu(self.bn1(self.stem(x))), 2)
        # Residual add, a [C, 1, 1] broadcast operand, a Python scalar and a
        # full-rank operand that was never channels-last.
        h = F.relu(self.bn2(self.conv(h)) + h) * self.scale * 0.5 + extra
        h = F.hardtanh(self.proj(F.avg_pool2d(h, 2)))
        return self.fc(h.mean((2, 3))), h


def test_conv_net_runs_channels_last_between_ops(max_calls, graph_texts):
    torch.manual_seed(0)
    model = ConvNet().eval()
    # The stem and the second conv run MAX's conv2d kernel (our tiled kernel
    # on a CPU without AVX-512); the projection, over 10x10 pixels, runs as
    # the shipped im2col kernel and a matmul.
    x, extra = torch.randn(2, 3, 40, 40), torch.randn(2, 8, 20, 20)
    with torch.no_grad():
        expected = model(x, extra)
        compiled = torch.compile(
            model, backend=max_backend, fullgraph=True, options={"strict": True}
        )
        got = compiled(x, extra)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert max_calls.count == 1
    (text,) = graph_texts()
    tiled = text.count(f'"{conv_kernel.KERNEL}"')
    assert (text.count("rmo.conv("), tiled) == ((2, 0) if AVX512 else (0, 2))
    assert text.count('symbol = "torch_max_backend_im2col"') == 1
    # In: the image and the operand that was never channels-last. Nothing
    # between the convs, the batch norms, the poolings and the pointwise ops,
    # and none out: im2col reads the average pooling's channels-last result.
    live = live_transposes(text)
    assert live[TO_LAST] == 2, live
    assert live[TO_FIRST] == 0, live


@pytest.mark.parametrize("cut", [1, 2])
def test_dead_permutes_are_reported_as_dead(cut):
    text = (
        "%1 = mo.constant <#M.dense_array<0, 2, 3, 1> : tensor<4xsi64>> : x\n"
        "%2 = rmo.mo.transpose(%arg0, %1) : t\n"
        "%3 = mo.constant <#M.dense_array<0, 3, 1, 2> : tensor<4xsi64>> : x\n"
        "%4 = rmo.mo.transpose(%2, %3) : t\n"
        "%5 = rmo.add(%2, %2) : t\n"
    )
    lines = text.splitlines()
    if cut == 2:
        lines.append("mo.output %4")
    live = live_transposes("\n".join(lines))
    assert live[TO_LAST] == 1
    assert live[TO_FIRST] == (cut == 2)


def test_dynamic_image_sizes_keep_the_im2col_kernel(max_calls, graph_texts):
    # One graph for every height and width: each conv picks MAX's kernel or
    # im2col + matmul by the size it was traced with (20x18 = 360 pixels: MAX's
    # kernel; 10x10 after the strided conv: im2col), and the im2col kernel
    # takes its output size from the input's at run time.
    torch.manual_seed(0)
    first = torch.nn.Conv2d(3, 6, 3, padding=1)
    strided = torch.nn.Conv2d(6, 5, 3, stride=2, padding=1, bias=False)
    dilated = torch.nn.Conv2d(5, 4, (3, 2), padding=(2, 1), dilation=(2, 1))

    def fn(x):
        return dilated(F.relu(strided(F.relu(first(x)))))

    compiled = torch.compile(
        fn, backend=max_backend, dynamic=True, options={"strict": True}
    )
    with torch.no_grad():
        for height, width in ((20, 18), (17, 23), (9, 12)):
            x = torch.randn(2, 3, height, width)
            torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)
    assert max_calls.count == 3
    (text,) = graph_texts()
    assert text.count("rmo.conv(") == 1
    assert text.count('symbol = "torch_max_backend_im2col"') == 2


class SmallMaps(torch.nn.Module):
    """A 3x3 convolution over more than 16x16 pixels (our tiled kernel or
    MAX's conv2d), then ones over fewer (windows and a product), strided and
    dilated."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.down = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.dilated = torch.nn.Conv2d(16, 16, 3, padding=2, dilation=2)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.down(F.relu(self.bn(self.stem(x)))))
        return self.dilated(h) + h


def test_a_channels_last_model_is_read_as_it_lies(max_calls, built_graphs, monkeypatch):
    # model.to(memory_format=torch.channels_last): the image and the 3x3
    # filters are taken as they lie (no copy at the call), the small maps'
    # windows written a pixel a row and multiplied by the filters as stored.
    from torch_max_backend.plan import InputKind
    from torch_max_backend.runtime import compiled_graph

    torch.manual_seed(0)
    model = SmallMaps().eval().to(memory_format=torch.channels_last)
    copied = []
    as_buffer = compiled_graph.as_buffer

    def watched(tensor: torch.Tensor):
        if not tensor.is_contiguous():
            copied.append(tuple(tensor.shape))
        return as_buffer(tensor)

    monkeypatch.setattr(compiled_graph, "as_buffer", watched)
    compiled = torch.compile(model, backend=max_backend, options={"strict": True})
    with torch.no_grad():
        for batch in (2, 3):
            x = torch.randn(batch, 3, 20, 20).contiguous(
                memory_format=torch.channels_last
            )
            if batch == 2:
                torch._dynamo.mark_dynamic(x, 0)
            got = compiled(x)
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
            assert got.is_contiguous(memory_format=torch.channels_last)
    assert max_calls.count == 2 and not copied, copied
    ((_, built),) = built_graphs  # one graph: the batch is symbolic
    kinds = [source.kind for source in built.plan.inputs]
    assert kinds.count(InputKind.CHANNELS_LAST) == 4, kinds  # image, 3 filters
    text = str(built.graph)
    assert text.count('symbol = "torch_max_backend_pixel_windows"') == 2
    assert "torch_max_backend_im2col" not in text
    tiled = text.count(f'"{conv_kernel.KERNEL}"')
    assert (text.count("rmo.conv("), tiled) == ((1, 0) if AVX512 else (0, 1))


def test_a_second_layout_is_taken_as_it_lies_too(max_calls, built_graphs):
    # The same module code met with a channels-last copy of its filter: Dynamo
    # traces the second with strides of its own (symbolic ints among the
    # graph's inputs). The graph still takes the channels-last input and
    # filter as they lie (judged by the traced strides) and returns eager's
    # layout.
    from torch_max_backend.plan import InputKind

    torch.manual_seed(0)
    plain = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.ReLU()
    ).eval()
    last = copy.deepcopy(plain).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 4, 5)
    with torch.no_grad():
        for module, image in (
            (plain, x),
            (last, x.contiguous(memory_format=torch.channels_last)),
        ):
            compiled = torch.compile(
                module, backend=max_backend, options={"strict": True}
            )
            got, want = compiled(image), module(image)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            assert got.stride() == want.stride()
    assert max_calls.count == 2 and len(built_graphs) == 2
    gm, built = built_graphs[1]
    metas = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    assert any(isinstance(m, torch.SymInt) for m in metas), metas
    kinds = [source.kind for source in built.plan.inputs]
    assert kinds.count(InputKind.CHANNELS_LAST) == 2, kinds
