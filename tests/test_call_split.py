"""benchmarks/call_split.py's parts that need no compile: op counts, the
split's arithmetic and the decode step's rewind."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from benchmarks import call_split

GRAPH_TEXT = """mo.graph @torch_max_graph(%arg0: !mo.tensor<[2], f32>) -> !mo.tensor<[2], f32> {
  %0 = mo.chain.create()
  %1 = mo.constant {value = #M.dense_array<2.0> : tensor<f32>} : !mo.tensor<[], f32>
  %2 = rmo.mul(%arg0, %1) : !mo.tensor<[2], f32>
  %3 = rmo.mo.reduce.max(%2) {axis = 0} : !mo.tensor<[1], f32>
  mo.output %2, %3
}
"""


def test_graph_ops_are_counted_from_the_log():
    counts: list[int] = []
    handler = call_split._GraphOps(counts)
    record = logging.LogRecord(
        "torch_max_backend.graphs",
        logging.DEBUG,
        __file__,
        1,
        "torch-max-backend: MAX graph %s:\n%s",
        ("inference_0", GRAPH_TEXT),
        None,
    )
    handler.emit(record)
    assert counts == [4]  # chain, constant, mul, reduce: not the header or output


def test_the_split_adds_up_to_the_instrumented_call():
    figures = {
        "model": "t5",
        "backend": "max",
        "call_ms": 1.0,
        "eager_ms": 3.0,
        "first_call_s": 2.0,
        "graphs": 1,
        "max_ops": [481],
        "upgrades": 1,
        "ms": {"whole": 1.2, "backend": 1.0, "graph": 0.9, "execute": 0.8},
    }
    lines = call_split.describe(figures)
    shares = {line.strip().split("  ")[0]: line for line in lines[2:]}
    assert "0.200 ms" in shares["outside our backend (Dynamo)"]
    assert "0.100 ms" in shares["our call path"]
    assert "66.7%" in shares["MAX execute"]
    assert "481" in lines[1] and "1 switched" in lines[1]


def test_an_unknown_model_is_named():
    with pytest.raises(SystemExit, match=r"unknown model 'bert'.*gpt2-decode"):
        call_split.model_and_inputs("bert")


def test_rewind_sets_each_cache_layer_back_to_the_prompt():
    layers = [SimpleNamespace(cumulative_length=torch.tensor([40])) for _ in "ab"]
    call_split.rewind({"past_key_values": SimpleNamespace(layers=layers)})
    assert [int(layer.cumulative_length) for layer in layers] == [call_split.PROMPT] * 2
    call_split.rewind({"input_ids": torch.zeros(1)})  # no cache: nothing to do


def test_the_peer_s_execute_is_described_without_a_split():
    figures = {
        "model": "t5",
        "backend": "peer",
        "call_ms": 1.2,
        "eager_ms": 3.0,
        "first_call_s": 2.0,
        "execute_ms": 0.9,
    }
    lines = call_split.describe(figures)
    assert lines[1].strip() == "MAX execute 0.900 ms" and len(lines) == 2


def test_a_loaded_model_s_execute_is_timed_and_the_rest_passes_through():
    clock = call_split._Clock()
    model = SimpleNamespace(execute=lambda *args: args, input_metadata=["x"])
    timed = call_split._TimedModel(model, clock)
    assert timed.execute(1, 2) == (1, 2) and clock.seconds["execute"] == 0.0
    clock.on = True
    assert timed.execute(3) == (3,) and clock.seconds["execute"] > 0.0
    assert timed.input_metadata == ["x"]
