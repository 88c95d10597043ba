"""Depthwise convolutions on the CPU by our kernels (lower/depthwise_conv.py):
the forward and the input gradient against eager, in one training graph."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend import max_backend


def test_depthwise_convolutions_and_their_input_gradients(max_calls, graph_texts):
    # Channels not a multiple of a vector (13, 10), windows cut by the
    # padding on every side and rows wide enough for whole blocks of
    # inner pixels (20), strides, uneven padding and dilation, a 1-d filter
    # padded past the sequence (mamba's), no bias, a symbolic batch, and
    # bfloat16 summed in float32.
    torch.manual_seed(0)
    same = torch.nn.Conv2d(13, 13, 3, padding=1, groups=13)
    strided = torch.nn.Conv2d(13, 13, 3, stride=2, padding=1, groups=13, bias=False)
    dilated = torch.nn.Conv2d(
        13, 13, (3, 5), stride=(2, 1), padding=(2, 1), dilation=(1, 2), groups=13
    )
    wide = torch.nn.Conv2d(13, 13, 7, padding=3, groups=13)
    sequence = torch.nn.Conv1d(10, 10, 4, padding=3, groups=10)
    half = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16).to(torch.bfloat16)

    def fn(x, seq, x16):
        h = same(x)
        outs = (h, strided(h), dilated(x), wide(F.gelu(h)), sequence(seq)[..., :11])
        loss = sum((o * o.detach().cos()).sum() for o in outs)
        return loss, *outs, half(x16)

    x = torch.randn(2, 13, 11, 20)
    seq = torch.randn(2, 10, 11)
    x16 = torch.randn(2, 16, 9, 12, dtype=torch.bfloat16)
    x_max, seq_max = x.clone().requires_grad_(), seq.clone().requires_grad_()
    torch._dynamo.mark_dynamic(x_max, 0)
    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})

    got = compiled(x_max, seq_max, x16)
    with torch.no_grad():
        want_half = fn(x, seq, x16)[-1]
    params = [*same.parameters(), *strided.parameters(), *dilated.parameters()]
    params += [*wide.parameters(), *sequence.parameters()]
    got[0].backward()
    got_grads = [x_max.grad, seq_max.grad, *(p.grad for p in params)]
    for p in params:
        p.grad = None
    x_eager, seq_eager = x.clone().requires_grad_(), seq.clone().requires_grad_()
    want = fn(x_eager, seq_eager, x16)
    want[0].backward()
    want_grads = [x_eager.grad, seq_eager.grad, *(p.grad for p in params)]

    torch.testing.assert_close(got[:-1], want[:-1], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got[-1], want_half, rtol=1.6e-2, atol=2e-2)
    torch.testing.assert_close(got_grads, want_grads, rtol=1e-5, atol=1e-4)
    assert max_calls.of("forward") == 1 and max_calls.of("backward") == 1
    forward, backward = graph_texts()
    assert forward.count('"torch_max_backend_depthwise_conv"') == 6
    assert backward.count('"torch_max_backend_depthwise_input_grad"') == 5
    # Six weight gradients: the bfloat16 layer's weight too.
    assert backward.count('"torch_max_backend_depthwise_weight_grad_last"') == 6


def test_depthwise_convolutions_with_symbolic_sizes(max_calls, graph_texts):
    # Every size symbolic but the channels and the filter (a prompt of any
    # length through mamba's padded 1-d filter, images of any size): the
    # kernels read the sizes at run time; two shapes, one graph.
    torch.manual_seed(0)
    sequence = torch.nn.Conv1d(10, 10, 4, padding=3, groups=10)
    strided = torch.nn.Conv2d(6, 6, 3, stride=2, padding=1, groups=6)

    def fn(x, image):
        return sequence(x)[..., : x.shape[-1]], strided(image)

    compiled = torch.compile(
        fn, backend=max_backend, dynamic=True, options={"strict": True}
    )
    with torch.no_grad():
        for length, height in [(13, 9), (6, 12)]:
            x = torch.randn(2, 10, length)
            image = torch.randn(1, 6, height, height + 3)
            torch.testing.assert_close(
                compiled(x, image), fn(x, image), rtol=1e-5, atol=1e-5
            )
    assert max_calls.count == 2
    (text,) = graph_texts()
    assert text.count('"torch_max_backend_depthwise_conv"') == 2
