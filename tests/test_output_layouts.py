"""Inference outputs keep eager's strides and aliasing: a channels-last or
transposed result comes back in that memory order, and outputs that view one
tensor's memory share it, so that writing into one shows in the others."""

from __future__ import annotations

import torch

from torch_max_backend import max_backend


def _storage_groups(outputs: tuple[torch.Tensor, ...]) -> list[int]:
    """For each output, the position of the first output sharing its memory."""
    pointers = [t.untyped_storage().data_ptr() for t in outputs]
    return [pointers.index(p) for p in pointers]


def _assert_like_eager(got: tuple, expected: tuple) -> None:
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(g, e, msg=f"output {i}")
        assert g.stride() == e.stride(), f"output {i}: {g.stride()} != {e.stride()}"
        assert g.storage_offset() == e.storage_offset(), f"output {i}"
        # A tensor of its own in eager is no view here either: autograd
        # forbids writing in place into a view a custom Function returned.
        assert e._is_view() or not g._is_view(), f"output {i} is a view"
    assert _storage_groups(got) == _storage_groups(expected)


def _layouts(x_t: torch.Tensor, images: torch.Tensor, weight: torch.Tensor) -> tuple:
    scaled = x_t * 2 + 1  # x_t's transposed memory order
    features = torch.nn.functional.conv2d(images, weight, padding=1).relu()
    gram = x_t @ x_t.t()
    first, second = gram.split(2)
    exps = x_t.exp()  # an intermediate in transposed order, viewed twice
    return (
        scaled,
        features,
        gram,
        gram[:, -1],
        gram.view(-1)[2:],
        first,
        second,
        exps[0],
        exps[1:].t(),
    )


def _layout_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    x_t = torch.randn(5, 4).t()
    images = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    return x_t, images, torch.randn(4, 3, 3, 3)


def test_outputs_have_eager_strides_and_share_memory_as_in_eager(max_calls):
    inputs = _layout_inputs()
    expected = _layouts(*inputs)
    compiled = torch.compile(_layouts, backend=max_backend, options={"strict": True})
    with torch.no_grad():
        got = compiled(*inputs)
    assert max_calls.of("inference") == 1
    _assert_like_eager(got, expected)
    assert got[1].is_contiguous(memory_format=torch.channels_last)
    # Writing through a view changes the tensor it views, as in eager.
    got[3].fill_(7.0)
    expected[3].fill_(7.0)
    torch.testing.assert_close(got[2], expected[2])
    torch.testing.assert_close(got[4], expected[4])


def _last_and_transposed(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    hidden = x.sin() * 3
    return hidden, hidden[:, -1], hidden.t(), hidden[1:]


def test_views_of_outputs_follow_dynamic_sizes(max_calls):
    compiled = torch.compile(
        _last_and_transposed, backend=max_backend, options={"strict": True}
    )
    for rows in (4, 7):
        x = torch.randn(rows, 6)
        torch._dynamo.mark_dynamic(x, 0)
        _assert_like_eager(compiled(x), _last_and_transposed(x))
    assert max_calls.of("inference") == 2


def _trained_layouts(
    x_t: torch.Tensor, images: torch.Tensor, weight: torch.Tensor, shift: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    # A mutated input that requires grad: AOTAutograd returns its new value
    # before the user's outputs.
    shift.add_(1)
    scaled = x_t * 2 + 1
    features = torch.nn.functional.conv2d(images, weight, padding=1).relu()
    # Saved for the backward as well as returned (the saved copy may differ).
    loss = (scaled * features.sum()).sum()
    return loss, scaled, scaled[0], features[:, 1], features


def test_training_outputs_have_eager_strides(max_calls):
    x_t, images, weight = _layout_inputs()
    leaves = [x_t.detach().requires_grad_(), images, weight.requires_grad_()]
    shift = torch.zeros(2, requires_grad=True)
    expected = _trained_layouts(*leaves, shift * 1)
    compiled = torch.compile(
        _trained_layouts, backend=max_backend, options={"strict": True}
    )
    mine = [x_t.detach().requires_grad_(), images, weight.detach().requires_grad_()]
    shifted = torch.zeros(2, requires_grad=True) * 1
    got = compiled(*mine, shifted)
    assert max_calls.of("forward") == 1
    torch.testing.assert_close(shifted, torch.ones(2))
    _assert_like_eager(got, expected)
    assert got[-1].is_contiguous(memory_format=torch.channels_last)
    sum(t.sum() for t in got).backward()
    sum(t.sum() for t in expected).backward()
    torch.testing.assert_close(mine[0].grad, leaves[0].grad)
    # The weight's gradient sums terms up to its scale (~600) that cancel:
    # eager's and ours differ in order, each within float32 rounding of that
    # scale (against float64: eager 7.4e-5 off, ours 9.6e-5, 1.6e-7 of it),
    # so they may differ by the sum of the two.
    scale = leaves[2].grad.abs().max()
    torch.testing.assert_close(mine[2].grad, leaves[2].grad, atol=4e-7 * scale, rtol=0)
    # Written in place, as a user may: the view of it sees the change.
    got[1].mul_(3)
    expected[1].mul_(3)
    torch.testing.assert_close(got[2], expected[2])
    assert max_calls.of("backward") == 1
