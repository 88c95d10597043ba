"""A compiled graph's results are fresh tensors where eager's are.

MAX hands back an input's own memory when a graph returns an input unchanged
(a clone or reshape it has nothing to compute for, a constant the graph
returns); torch would return a new tensor, so a caller writing into the
result must not change the input, nor the constant a later call returns."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import max_backend

pytestmark = pytest.mark.usefixtures("count_max_compiles")


def _copies_views_and_constants(x: torch.Tensor):
    return x.clone(), x.reshape(4).clone(), x[1:], torch.tensor([1.0, 2.0]), x + 1


def test_clones_and_constants_are_fresh_and_views_still_alias():
    compiled = torch.compile(
        _copies_views_and_constants, backend=max_backend, options={"strict": True}
    )
    x = torch.zeros(2, 2)
    want = _copies_views_and_constants(torch.zeros(2, 2))
    got = compiled(x)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    clone, flat, view, constant, _ = got
    clone.fill_(3.0)
    flat.fill_(4.0)
    constant.fill_(5.0)
    assert torch.equal(x, torch.zeros(2, 2)), "writing a clone changed its source"
    # A view is a view, as in eager: writing it writes the input.
    view.fill_(7.0)
    assert torch.equal(x[1:], torch.full((1, 2), 7.0))
    again = compiled(torch.zeros(2, 2))
    torch.testing.assert_close(again[3], torch.tensor([1.0, 2.0]))
    assert again[0].data_ptr() != clone.data_ptr()


def _alike(x: torch.Tensor):
    return x.relu(), x.relu()


def test_outputs_computed_alike_are_two_tensors():
    # MAX computes the two alike once and returned one buffer for both.
    compiled = torch.compile(_alike, backend=max_backend, options={"strict": True})
    x = torch.randn(4, 8)
    first, second = compiled(x)
    torch.testing.assert_close(first, x.relu())
    assert first.data_ptr() != second.data_ptr()
    first.fill_(-1.0)
    torch.testing.assert_close(second, x.relu())


def test_exported_outputs_computed_alike_are_copied():
    import numpy as np

    from torch_max_backend.aot.runner import _outputs_sharing_memory

    one = np.zeros(4)
    assert _outputs_sharing_memory([one, one, np.zeros(4), one[:2]], []) == [1, 3]
