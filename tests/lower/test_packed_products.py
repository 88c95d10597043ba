"""Products over weights the vendor BLAS packed once (frozen_weights): against
eager, packed again when a weight changes, never in a training step."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend import explain, max_backend
from torch_max_backend.kernels import weight_packing
from torch_max_backend.kernels.product_timing import time_forms
from torch_max_backend.plan import (
    GraphPlan,
    InputKind,
    InputSource,
    plan_from_data,
    plan_to_data,
)

KERNEL = "torch_max_backend_vendor_packed_matmul"
needs_packing = pytest.mark.skipif(
    not weight_packing.packs("float32"),
    reason="no vendor BLAS that packs weights (mkl) here",
)
FROZEN = {"frozen_weights": True, "product_strategy": "vendor_packed"}


@pytest.fixture(autouse=True)
def strategy_from_options(fixed_product_rules, monkeypatch):
    """The options' product_strategy applies: the suite pins it by variable."""
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY", raising=False)


class TwoProducts(torch.nn.Module):
    """A Linear with a bias (weight [N, K]) and a product with a weight [K, N]."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(40, 24)
        self.kn = torch.nn.Parameter(torch.randn(24, 70))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) @ self.kn


def _compiled(model: torch.nn.Module, options: dict) -> torch.nn.Module:
    return torch.compile(model, backend=max_backend, options=options)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_products_read_their_weights_packed_and_match_eager(
    max_calls, graph_texts, dtype
):
    if not weight_packing.packs(str(dtype).removeprefix("torch.")):
        pytest.skip(f"no vendor BLAS that packs {dtype} weights here")
    model, x = TwoProducts().eval().to(dtype), torch.randn(6, 40).to(dtype)
    # Half precision: MKL sums in float32 and rounds once, as PyTorch does.
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    with torch.no_grad():
        got = _compiled(model, FROZEN)(x)
        assert got.dtype == dtype
        torch.testing.assert_close(got, model(x), rtol=tol, atol=tol * 10)
    assert max_calls.count == 1
    (text,) = graph_texts()
    assert text.count(KERNEL) == 2
    assert "mo.matmul" not in text


@needs_packing
def test_a_weight_changed_or_replaced_is_packed_again(max_calls):
    model, x = TwoProducts().eval(), torch.randn(6, 40)
    compiled = _compiled(model, FROZEN)
    with torch.no_grad():
        compiled(x)
        model.linear.weight.mul_(-2.0)  # in place: its version counter moves
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        model.load_state_dict(TwoProducts().state_dict() | {"kn": torch.ones(24, 70)})
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        model.kn = torch.nn.Parameter(torch.randn(24, 70))  # another tensor
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert max_calls.count >= 4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_weights_are_cast_once_when_packed_and_again_when_changed(
    max_calls, graph_texts, dtype
):
    if not weight_packing.packs(str(dtype).removeprefix("torch.")):
        pytest.skip(f"no vendor BLAS that packs {dtype} weights here")
    model, x = TwoProducts().eval(), torch.randn(6, 40)
    compiled = _compiled(model, FROZEN)

    def both() -> tuple[torch.Tensor, torch.Tensor]:
        # A region each: eager autocast keeps its casts of parameters until
        # the region ends.
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            got = compiled(x)
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            return got, model(x)

    got, expected = both()
    assert got.dtype == dtype
    # Both products take the same bits: torch's rounding of the same weights.
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-1)
    with torch.no_grad():
        model.linear.weight.mul_(-2.0)  # the float32 parameter, in place
    got, expected = both()
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-1)
    assert max_calls.count == 2
    (text,) = graph_texts()
    assert text.count(KERNEL) == 2


@needs_packing
def test_a_cast_weight_is_packed_from_its_float32_tensor():
    if not weight_packing.packs("bfloat16"):
        pytest.skip("no vendor BLAS that packs bfloat16 weights here")
    spec = weight_packing.PackSpec(6, 40, 24, True, 2, "bfloat16", "float32")
    packed = weight_packing.pack_weight(torch.randn(24, 40), spec)
    assert packed.numel() == weight_packing.packed_length(spec)
    with pytest.raises(ValueError, match=r"float32 \[24, 40\], not torch.bfloat16"):
        weight_packing.pack_weight(torch.randn(24, 40, dtype=torch.bfloat16), spec)


@needs_packing
def test_without_frozen_weights_or_in_training_no_weight_is_packed(graph_texts):
    model, x = TwoProducts().eval(), torch.randn(6, 40)
    with torch.no_grad():
        out = _compiled(model, {"product_strategy": "vendor_packed"})(x)
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    # A training step's graphs read weights its update changes every step.
    trained = TwoProducts()
    loss = _compiled(trained, FROZEN)(x).sum()
    loss.backward()
    eager = TwoProducts()
    eager(x).sum().backward()
    torch.testing.assert_close(trained.kn.grad, eager.kn.grad, rtol=1e-5, atol=1e-4)
    assert all(KERNEL not in text for text in graph_texts())


@needs_packing
def test_explain_shows_the_packed_strategy():
    model, x = TwoProducts().eval(), torch.randn(6, 40)
    with torch.no_grad():
        report = explain(model, x, options=FROZEN).as_dict()
    strategies = {
        op["op"]: op["strategies"] for g in report["graphs"] for op in g["ops"]
    }
    assert strategies["aten.addmm.default"] == {"vendor_packed": 1}
    assert strategies["aten.mm.default"] == {"vendor_packed": 1}


def test_a_packed_input_round_trips_through_a_saved_plan():
    spec = weight_packing.PackSpec(6, 40, 24, True, 2, "bfloat16")
    packed = InputSource(InputKind.PACKED, 3, tuple(spec.as_list()))
    plan = GraphPlan("cpu", (InputSource(InputKind.FX_INPUT, 0), packed), ())
    saved = plan_from_data(plan_to_data(plan))
    assert saved == plan
    assert weight_packing.PackSpec.from_list(list(saved.inputs[1].packing)) == spec
    cast = weight_packing.PackSpec(6, 40, 24, True, 2, "bfloat16", "float32")
    assert weight_packing.PackSpec.from_list(cast.as_list()) == cast
    data = plan_to_data(plan)
    data["inputs"][1][2] = [6, 40]
    with pytest.raises(ValueError, match="a packed input has 7 sizes"):
        plan_from_data(data)


@needs_packing
def test_a_weight_of_another_shape_is_refused():
    spec = weight_packing.PackSpec(rows=6, k=40, n=24, weight_nk=True, parts=2)
    with pytest.raises(ValueError, match=r"float32 \[24, 40\], not torch.float32"):
        weight_packing.pack_weight(torch.randn(40, 24), spec)


@needs_packing
@pytest.mark.measured_products
def test_the_packed_form_is_timed_against_the_others():
    times = time_forms(64, 256, 192, True, ["matmul", "vendor_packed"])
    assert set(times) == {"matmul", "vendor_packed"}
    assert all(t > 0 for t in times.values())
    with pytest.raises(ValueError, match="in the cache"):
        time_forms(64, 256, 192, True, ["vendor_packed"], streamed=True)
