"""Inputs eager PyTorch refuses are refused the same way: an index out of
range or an integer division by zero raises eager's error type, with a message
naming the op and node, instead of reading or writing outside a tensor or
stopping the process (an integer division by zero traps on x86)."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import max_backend
from torch_max_backend.lower.builder import build_graph

from .aten_graphs import aten_graphs


def _indexed(
    x: torch.Tensor,
    rows: torch.Tensor,
    columns: torch.Tensor,
    ids: torch.Tensor,
    table: torch.Tensor,
    counts: torch.Tensor,
    divisors: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    return (
        x[rows],
        torch.gather(x, 1, columns),
        torch.zeros_like(x).scatter_add(1, columns, torch.ones_like(x)),
        torch.nn.functional.embedding(ids, table),
        x.index_put((rows,), torch.ones(3), accumulate=True),
        counts // divisors,
        counts % divisors,
    )


def _valid() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {
        "x": torch.randn(4, 3),
        "rows": torch.tensor([3, -4, 1]),  # negative ones count from the end
        "columns": torch.tensor([[2, 0, 1]] * 4),
        "ids": torch.tensor([[0, 5], [2, 2]]),
        "table": torch.randn(6, 2),
        "counts": torch.tensor([7, -7, 9]),
        "divisors": torch.tensor([2, 3, -4]),
    }


# Each: the input changed, its value, the error eager raises, and what ours says.
REFUSED = [
    ("rows", torch.tensor([3, 4, 1]), IndexError, r"aten\.index\.Tensor"),
    ("rows", torch.tensor([3, -5, 1]), IndexError, r"aten\.index\.Tensor"),
    ("columns", torch.tensor([[2, 0, 3]] * 4), RuntimeError, r"aten\.gather"),
    ("columns", torch.tensor([[2, -1, 1]] * 4), RuntimeError, r"aten\.gather"),
    ("ids", torch.tensor([[0, 6], [2, 2]]), IndexError, r"aten\.embedding"),
    ("divisors", torch.tensor([2, 0, -4]), RuntimeError, r"ZeroDivisionError"),
]


def test_bad_indices_and_zero_divisors_raise_as_in_eager(max_calls):
    compiled = torch.compile(_indexed, backend=max_backend, options={"strict": True})
    inputs = _valid()
    for got, want in zip(compiled(**inputs), _indexed(**inputs), strict=True):
        torch.testing.assert_close(got, want)
    for name, value, error, message in REFUSED:
        bad = {**inputs, name: value}
        with pytest.raises(error):
            _indexed(**bad)
        with pytest.raises(error, match=message) as raised:
            compiled(**bad)
        assert "out of bounds" in str(raised.value) or "division" in str(raised.value)
    # One graph served every call: the checks are computed, not compiled in.
    assert max_calls.of("inference") == 1 + len(REFUSED)
    assert len(set(max_calls.names)) == 1


def _put_rows(x: torch.Tensor, rows: torch.Tensor) -> None:
    x[rows] = 1.0


def test_a_refused_write_in_place_leaves_the_tensor_as_it_was(max_calls):
    compiled = torch.compile(_put_rows, backend=max_backend, options={"strict": True})
    x = torch.zeros(4, 3)
    compiled(x, torch.tensor([0, 2]))
    torch.testing.assert_close(x.sum(), torch.tensor(6.0))
    with pytest.raises(IndexError, match="index_put"):
        compiled(x, torch.tensor([1, 9]))
    torch.testing.assert_close(x.sum(), torch.tensor(6.0))
    assert max_calls.of("inference") == 2


def test_a_bag_of_embeddings_refuses_a_row_past_the_table(max_calls):
    table = torch.randn(5, 3)
    compiled = torch.compile(
        torch.nn.functional.embedding_bag, backend=max_backend, options={"strict": True}
    )
    offsets = torch.tensor([0, 1])
    ids = torch.tensor([1, 4, 2])
    torch.testing.assert_close(
        compiled(ids, table, offsets),
        torch.nn.functional.embedding_bag(ids, table, offsets),
    )
    bad = torch.tensor([1, 5, 2])
    with pytest.raises(RuntimeError):
        torch.nn.functional.embedding_bag(bad, table, offsets)
    with pytest.raises(RuntimeError, match=r"out of bounds .* _embedding_bag"):
        compiled(bad, table, offsets)
    assert max_calls.of("inference") == 2


def _losses(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (
        torch.nn.functional.nll_loss(logits.log_softmax(1), targets),
        torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100),
    )


@pytest.mark.parametrize("bad", [7, -3], ids=["past-the-classes", "negative"])
def test_a_target_out_of_the_classes_raises_index_error_as_in_eager(bad, max_calls):
    # nll_loss and cross_entropy reach us decomposed into a gather, whose own
    # error is a RuntimeError; eager's losses raise IndexError.
    compiled = torch.compile(_losses, backend=max_backend, options={"strict": True})
    logits = torch.randn(3, 5)
    good, wrong = torch.tensor([1, 4, 2]), torch.tensor([1, bad, 2])
    for got, want in zip(compiled(logits, good), _losses(logits, good), strict=True):
        torch.testing.assert_close(got, want)
    with pytest.raises(IndexError, match="Target"):
        _losses(logits, wrong)
    with pytest.raises(IndexError, match=r"Target .*out of bounds.*nll_loss"):
        compiled(logits, wrong)
    assert max_calls.of("inference") == 2


def _resampled(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # Source positions computed from literals alone (arange, scale, clamp):
    # PyTorch computes them at planning, so their bounds are known.
    return (
        torch.nn.functional.interpolate(x, scale_factor=1.7, mode="bicubic"),
        torch.nn.functional.interpolate(x, size=(3, 4), mode="nearest"),
        x[:, :, torch.arange(-2, 3)],
    )


def test_indices_known_in_range_at_planning_carry_no_check():
    # Each check costs a reduction kernel's compile (about 0.7 s on a 2-core
    # AMD EPYC, max 26.7): bicubic interpolation alone had 16 index ops.
    x = torch.randn(1, 2, 5, 6)
    built = build_graph(aten_graphs(_resampled, x)[0])
    assert built.plan.checks == ()
    compiled = torch.compile(_resampled, backend=max_backend, options={"strict": True})
    for got, want in zip(compiled(x), _resampled(x), strict=True):
        torch.testing.assert_close(got, want)


def _past_the_end(x: torch.Tensor) -> torch.Tensor:
    return x[torch.arange(5)]


def test_indices_known_at_planning_out_of_range_still_raise(max_calls):
    compiled = torch.compile(
        _past_the_end, backend=max_backend, options={"strict": True}
    )
    x = torch.randn(4, 3)
    with pytest.raises(IndexError):
        _past_the_end(x)
    with pytest.raises(IndexError, match=r"out of bounds .*aten\.index\.Tensor"):
        compiled(x)
    assert max_calls.of("inference") == 1


def _rows_twice(x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    return x[rows] + y[rows] * x[:, rows].sum()


def test_one_index_tensor_indexing_several_times_is_checked_once_per_size():
    # x[rows] and y[rows] index 4 rows: one check; x[:, rows] indexes 3 columns.
    x, y, rows = torch.randn(4, 3), torch.randn(4, 3), torch.tensor([0, 2, -1])
    built = build_graph(aten_graphs(_rows_twice, x, y, rows)[0])
    assert len(built.plan.checks) == 2
    assert "dimension 0 with size 4" in built.plan.checks[0].message
    assert "dimension 1 with size 3" in built.plan.checks[1].message
