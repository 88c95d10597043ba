"""Grouped products (lower/ops/grouped_products.py): transformers' fallback
op and aten._grouped_mm against eager, forward and backward, with empty
groups and rows after the last group; offsets that do not count up raise."""

from __future__ import annotations

import pytest
import torch
import transformers.integrations.moe  # noqa: F401  (defines transformers::grouped_mm_fallback)

from torch_max_backend import explain, max_backend

from .family_check import check_family

# bfloat16 rows of 8 (16 bytes): torch takes no other strides.
ROWS, K, N, EXPERTS = 12, 8, 8, 3
# Every group filled, rows after the last group, empty groups (first, middle, all).
OFFSETS = ([3, 7, 10], [0, 12, 12], [5, 5, 9], [0, 0, 0])


def test_grouped_product_lowerings_build_for_every_opinfo_case():
    check_family(
        "grouped_products",
        (
            "aten._grouped_mm.default",
            "transformers.grouped_mm_fallback.default",
            "transformers.grouped_mm_fallback_backward.default",
        ),
    )


def _fallback(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return torch.ops.transformers.grouped_mm_fallback(x, w, offs)


def _aten(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    # torch takes bfloat16 only (its meta function refuses others).
    return torch._grouped_mm(x.bfloat16(), w.bfloat16(), offs=offs)


def _step(fn, x, w, offs, grad):
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    out = fn(x, w, offs)
    out.backward(grad)
    return out.detach(), x.grad, w.grad


@pytest.mark.parametrize("fn", [_fallback, _aten], ids=["fallback", "aten"])
def test_forward_and_gradients_match_eager(fn, max_calls):
    compiled = torch.compile(fn, backend=max_backend, options={"strict": True})
    torch.manual_seed(0)
    x, w = torch.randn(ROWS, K), torch.randn(EXPERTS, K, N)
    grad = torch.randn(ROWS, N)
    for counts in OFFSETS:
        offs = torch.tensor(counts, dtype=torch.int32)
        got = _step(compiled, x, w, offs, grad)
        want = _step(fn, x, w, offs, grad)
        # Rows after the last group: zeros here, whatever memory held in eager.
        last = counts[-1]
        # bfloat16's rounding of sums over 8 or 12 terms.
        close = {} if fn is _fallback else {"rtol": 2e-2, "atol": 2e-2}
        torch.testing.assert_close(got[0][:last], want[0][:last], **close)
        assert not got[0][last:].any()
        torch.testing.assert_close(got[1][:last], want[1][:last], **close)
        torch.testing.assert_close(got[2], want[2], **close)
    # One forward and one backward graph served every offsets.
    assert len(set(max_calls.names)) == 2
    assert max_calls.count == 2 * len(OFFSETS)


def test_a_batch_without_offsets_is_a_batched_product(max_calls):
    def batched(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch._grouped_mm(a, b)

    compiled = torch.compile(batched, backend=max_backend, options={"strict": True})
    a = torch.randn(EXPERTS, 4, K, dtype=torch.bfloat16)
    b = torch.randn(EXPERTS, K, N, dtype=torch.bfloat16)
    torch.testing.assert_close(compiled(a, b), batched(a, b), rtol=2e-2, atol=2e-2)
    assert max_calls.count == 1


@pytest.mark.parametrize("counts", [[3, 2, 10], [3, 7, 13], [-1, 7, 10]])
def test_offsets_that_do_not_count_up_within_the_rows_raise(counts):
    compiled = torch.compile(_fallback, backend=max_backend, options={"strict": True})
    x, w = torch.randn(ROWS, K), torch.randn(EXPERTS, K, N)
    compiled(x, w, torch.tensor([3, 7, 10]))
    with pytest.raises(RuntimeError, match="offs must count up from 0 to at most 12"):
        compiled(x, w, torch.tensor(counts))


@pytest.mark.parametrize("experts", ["grouped_mm", "batched_mm"])
def test_transformers_experts_reach_max_whole(experts):
    # explain() runs PyTorch only: what a compile would hand MAX.
    from benchmarks.call_split import model_and_inputs

    model, inputs = model_and_inputs("mixtral")
    model.set_experts_implementation(experts)
    with torch.no_grad():
        report = explain(model, **inputs)
    (graph,) = report.graphs
    assert report.unsupported == {} and not report.graph_breaks
    ops = {op.op for op in graph.ops}
    if experts == "grouped_mm":
        assert {"transformers.grouped_mm_fallback.default", "aten.histc.default"} <= ops


def test_mixtral_forward_runs_whole_on_max(max_calls):
    from benchmarks.call_split import model_and_inputs

    model, inputs = model_and_inputs("mixtral")
    with torch.no_grad():
        want = model(**inputs).logits
        compiled = torch.compile(model, backend=max_backend, options={"strict": True})
        got = compiled(**inputs).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert max_calls.count == 1


def test_a_token_count_known_only_at_run_time_is_one_graph(max_calls):
    compiled = torch.compile(_fallback, backend=max_backend, options={"strict": True})
    w = torch.randn(EXPERTS, K, N)
    for rows, counts in ((12, [3, 7, 10]), (20, [5, 5, 18]), (7, [0, 7, 7])):
        x = torch.randn(rows, K)
        torch._dynamo.mark_dynamic(x, 0)
        offs = torch.tensor(counts)
        got, want = compiled(x, w, offs), _fallback(x, w, offs)
        torch.testing.assert_close(got[: counts[-1]], want[: counts[-1]])
        assert not got[counts[-1] :].any()
    assert len(set(max_calls.names)) == 1 and max_calls.count == 3
