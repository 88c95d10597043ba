"""The model check (benchmarks.hf_models): a few architectures run here, in full."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from benchmarks import hf_models
from benchmarks.hf_architectures import ARCHITECTURES, build, by_name
from benchmarks.hf_check import Comparison, check


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_architecture_passes_inference_and_a_training_step_on_max(name, max_calls):
    result = check(by_name(name))
    for phase in ("inference", "training"):
        outcome = result[phase]
        assert outcome["status"] == "pass", outcome
        assert outcome["fallback_ops"] == {}
        assert outcome["max_diff"] < 1e-3
        # Summed over the phase's graphs, whose compiles overlap (worker
        # processes, a forward and backward compiled together), each within
        # the first call; near 0 when MAX's cache already holds the graphs.
        phase_s = outcome.get("all_on_max_s", outcome["first_call_s"])
        assert 0 <= outcome["compile_s"] <= outcome["graphs"] * phase_s
    # The first step is timed before the update's background compile ends.
    training = result["training"]
    assert 0 < training["first_call_s"] <= training["all_on_max_s"]
    # One inference graph; two steps' forward, backward and AdamW graphs.
    assert max_calls.of("inference") >= 3 and max_calls.of("backward") == 2
    assert hf_models._verdict(result) == "pass"


def test_the_list_covers_the_kinds_the_check_promises():
    kinds = {a.kind for a in ARCHITECTURES}
    assert {"decoder LM", "encoder", "encoder-decoder", "vision", "speech"} <= kinds
    assert {"segmentation"} <= kinds
    names = " ".join(a.name for a in ARCHITECTURES)
    assert "GQA" in names and "state space" in names and "windowed" in names
    assert len(ARCHITECTURES) >= 15


def test_every_dropout_is_off_so_training_steps_are_deterministic():
    model, inputs = build(by_name("bert"))
    first, second = model(**inputs).logits, model(**inputs).logits
    assert model.training
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def test_a_difference_beyond_tolerance_is_reported_with_its_name():
    comparison = Comparison(1e-3, 1e-3)
    comparison.add("output logits", torch.ones(3), torch.ones(3))
    comparison.add("gradient w", torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]))
    result = comparison.result()
    assert result["status"] == "mismatch"
    assert result["max_diff"] == pytest.approx(0.5)
    assert result["detail"].startswith("gradient w")


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(SystemExit, match=r"unknown architecture 'nope'.*llama"):
        by_name("nope")


def test_the_report_names_ops_left_to_pytorch():
    phase = {"status": "pass", "max_diff": 0.0, "detail": "", "graphs": 2}
    result = {
        "name": "x",
        "kind": "encoder",
        "precision": "fp32",
        "inference": {**phase, "fallback_ops": {}, "first_call_s": 1.0},
        "training": {
            **phase,
            "fallback_ops": {"aten.foo.default": "no MAX lowering"},
            "first_call_s": 2.0,
        },
    }
    (row,) = hf_models.rows([result])
    assert "aten.foo.default (no MAX lowering)" in row
    # A phase without compile seconds (a crashed one has none) shows "-".
    assert row[-3:] == ["1.0 / 2.0", "-", "- / -"]
    assert hf_models._verdict(result) != "pass"
    # The training step's first call over inference's, which issue 59 bounds.
    assert hf_models.first_step_ratios([result]) == {"x fp32": 2.0}
    crashed = {**result, "training": {"status": "error", "fallback_ops": {}}}
    assert hf_models.first_step_ratios([crashed]) == {}
    line = hf_models._ratio_line([result], jobs=2)
    assert "1 of 1 rows" in line
    # Paired checks share the cores, which a step's two compiles need.
    assert "2 checks at a time" in line
    assert "one check at a time" in hf_models._ratio_line([result], jobs=1)


def test_a_whole_graph_left_to_pytorch_fails_the_row():
    import warnings

    from benchmarks.hf_check import _fallback_ops
    from torch_max_backend import FallbackWarning

    message = (
        "torch-max-backend: graph inference_0 runs in PyTorch: MAX failed to "
        "compile graph inference_0 (171 FX nodes) for cpu: RemoteCompileError: "
        "failed. Pass options={'strict': True} to raise instead."
    )
    caught = [warnings.WarningMessage(message, FallbackWarning, "x.py", 1)]
    ops = _fallback_ops(caught)
    assert list(ops) == ["graph inference_0"]
    assert "MAX failed to compile" in ops["graph inference_0"]


def test_a_failure_other_than_a_difference_fails_the_phase():
    comparison = Comparison(1e-3, 1e-3)
    comparison.add("step 2 output logits", torch.ones(3), torch.ones(3))
    comparison.fail("1 graph call(s) ran in PyTorch")
    result = comparison.result()
    assert result["status"] == "mismatch"
    assert result["detail"] == "1 graph call(s) ran in PyTorch"
