"""The Core ATen opset of the installed torch against our registry."""

from __future__ import annotations

import torch

from torch_max_backend import MAPPING_TORCH_ATEN_TO_MAX
from torch_max_backend.lower.coverage import KNOWN_GAPS, core_overloads, coverage
from torch_max_backend.lower.registry import decomposition_table


def test_core_opset_is_read_from_torchgen():
    overloads = core_overloads()
    # torch 2.13 tags 193 overloads core; a newer torch may add some, and
    # the next test then names any that lack a lowering.
    assert len(overloads) >= 193
    assert torch.ops.aten.convolution.default in overloads
    assert torch.ops.aten.add.Tensor in overloads
    assert len(set(overloads)) == len(overloads)


def test_every_core_overload_is_lowered_or_a_listed_gap():
    # Decomposed overloads count as covered: they reach MAX as lowered ops.
    decomposed = decomposition_table()
    missing = [
        str(op)
        for op in core_overloads()
        if op not in MAPPING_TORCH_ATEN_TO_MAX
        and op not in decomposed
        and str(op) not in KNOWN_GAPS
    ]
    assert not missing, (
        f"core overloads with no lowering and no stated reason: {missing}"
    )
    assert len(KNOWN_GAPS) <= 5
    core_names = {str(op) for op in core_overloads()}
    assert set(KNOWN_GAPS) <= core_names, "a known gap that is not a core overload"
    lowered_gaps = [g for g in KNOWN_GAPS if g in map(str, MAPPING_TORCH_ATEN_TO_MAX)]
    assert not lowered_gaps, f"listed as gaps but lowered (remove them): {lowered_gaps}"
    for reason in KNOWN_GAPS.values():
        assert len(reason) > 20, "each gap needs its reason stated plainly"


def test_coverage_rows_agree_with_the_registry():
    rows = {str(r.op): r for r in coverage()}
    assert len(rows) == len(core_overloads())
    assert rows["aten.add.Tensor"].status == "lowered"
    for name, reason in KNOWN_GAPS.items():
        assert rows[name].status == "gap"
        assert rows[name].note == reason
    # A partial lowering names what it covers.
    assert "transposed" in rows["aten.convolution.default"].note
