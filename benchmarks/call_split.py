"""Where one compiled call of a small model goes: Dynamo, AOTAutograd, our
call path and MAX's execute (benchmarks/call_overhead.py's ``--model`` mode).

    python -m benchmarks.call_overhead --model t5
    python -m benchmarks.call_overhead --model gpt2-decode
    PEER_PYTHON -m benchmarks.call_overhead --model t5 --backend peer

The models are the model check's (benchmarks/hf_architectures.py: 2 layers,
64 wide, 16 tokens, batch 2; the mixture-of-experts ones 4 experts, top 2)
called for inference without labels, and GPT-2 small's batch-1
decode step over a static KV cache (the graph generate() compiles). Each
call is timed whole; with ``--backend max`` four points inside it are
timed too: the function our backend hands Dynamo (Dynamo's guards and
frame lie outside it, and whatever the Python there costs right after an
execute: GPT-2's decode step spends 0.2 ms in Dynamo's own work, 1-5 ms
outside our function), each ``CompiledGraph`` call (AOTAutograd's
wrapper lies between), and each MAX execute inside those (the rest is our
call path: argument buffers, output tensors, check flags, write-backs).
The instrumented calls and the plain ones alternate in rounds; the figures
are medians over calls, each layer's taken per call (means let a few slow
calls in: T5's on an Intel Xeon read 1.6 ms a call where the median was
1.2). ``--backend peer`` times torch-mojo-backend's compiled call whole and
its MAX execute (it pins another MAX, so it runs from a virtual environment
of its own without this package). Nothing here imports torch_max_backend
unless ``--backend max``.
"""

from __future__ import annotations

import logging
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

MODELS = ("t5", "deberta-v2", "llama", "gpt2-decode", "mixtral", "qwen2-moe")
CAPACITY = 64
PROMPT = 16


def _small(name: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    from benchmarks.hf_architectures import build, by_name

    model, inputs = build(by_name(name))
    # A plain forward call, without the loss: an encoder-decoder is handed
    # its decoder's tokens instead of labels to shift.
    labels = inputs.pop("labels", None)
    if model.config.is_encoder_decoder and labels is not None:
        inputs["decoder_input_ids"] = labels
    if name == "llama":
        # As a tokenizer hands it. Without a mask transformers looks for
        # packed sequences (a cumulative sum over booleans), which the
        # peer's MAX fails to compile.
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    return model.eval(), inputs


def _decode_step() -> tuple[torch.nn.Module, dict[str, Any]]:
    """GPT-2 small and the inputs of one batch-1 decode step after a
    ``PROMPT``-token prefill into a static cache of ``CAPACITY`` tokens.
    Every call writes the same slot: ``rewind`` sets the cache's length back
    before each (a step advances it, and eager refuses a full cache)."""
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    cache = transformers.StaticCache(config=model.config, max_cache_len=CAPACITY)
    ids = torch.randint(0, 1000, (1, PROMPT))
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    position = torch.tensor([PROMPT])
    inputs = {
        "input_ids": ids[:, -1:],
        "past_key_values": cache,
        "cache_position": position,
        "position_ids": position[None],
        "use_cache": True,
    }
    return model, inputs


def rewind(inputs: dict[str, Any]) -> None:
    """The decode step's cache as it was after the prefill (untimed)."""
    cache = inputs.get("past_key_values")
    for layer in getattr(cache, "layers", ()):
        layer.cumulative_length.fill_(PROMPT)


def model_and_inputs(name: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    if name == "gpt2-decode":
        return _decode_step()
    if name not in MODELS:
        raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return _small(name)


class _Clock:
    """Seconds spent inside each instrumented layer over the calls timed."""

    def __init__(self) -> None:
        self.seconds = {"backend": 0.0, "graph": 0.0, "execute": 0.0}
        self.on = False

    def timed(self, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        seconds = self.seconds

        def call(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return fn(*args, **kwargs)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[key] += time.perf_counter() - start

        return call


def _instrumented_max(clock: _Clock) -> tuple[Callable[..., Any], list[Any]]:
    """Our backend with its returned function, each CompiledGraph call and
    each MAX execute timed by ``clock``; also the graphs it made."""
    from torch_max_backend import max_backend
    from torch_max_backend.runtime.compiled_graph import CompiledGraph

    graphs: list[CompiledGraph] = []
    init, call = CompiledGraph.__init__, CompiledGraph.__call__
    switch = CompiledGraph.switch_model

    def timed_execute(graph: CompiledGraph) -> None:
        execute, sharing = graph._run
        if execute is not None:
            graph._run = (clock.timed("execute", execute), sharing)

    def remember(self: CompiledGraph, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        timed_execute(self)
        graphs.append(self)

    def switched(self: CompiledGraph, *args: Any) -> None:
        switch(self, *args)
        timed_execute(self)

    CompiledGraph.__init__ = remember  # type: ignore[method-assign]
    CompiledGraph.__call__ = clock.timed("graph", call)  # type: ignore[method-assign]
    CompiledGraph.switch_model = switched  # type: ignore[method-assign]

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return clock.timed("backend", max_backend(gm, example_inputs))

    return backend, graphs


class _TimedModel:
    """A MAX model whose ``execute`` ``clock`` times; the rest passes through."""

    def __init__(self, model: Any, clock: _Clock) -> None:
        self._model = model
        self.execute = clock.timed("execute", model.execute)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def _peer_backend(clock: _Clock) -> Any:
    """torch-mojo-backend's backend, imported as its README shows, with
    each MAX model it loads timed by ``clock``."""
    import max.engine

    load = max.engine.InferenceSession.load

    def timed_load(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _TimedModel(load(self, *args, **kwargs), clock)

    max.engine.InferenceSession.load = timed_load  # type: ignore[method-assign]
    from torch_mojo_backend import mojo_backend  # type: ignore[import-not-found]

    return mojo_backend


def _per_call(
    call: Callable[[], Any], calls: int, inputs: dict[str, Any]
) -> list[float]:
    times = []
    for _ in range(calls):
        rewind(inputs)
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def split(
    name: str, backend: str = "max", calls: int = 200, warm: int = 20, rounds: int = 10
) -> dict[str, Any]:
    """Milliseconds per call of ``name`` compiled with ``backend``: the
    median call, eager's, the median MAX execute and (ours) the median of
    each layer and the op count of each MAX graph.

    Eager runs last, apart: PyTorch's OpenMP threads spin after a call and
    would slow the compiled calls timed next (they share two cores)."""
    torch.manual_seed(0)
    model, inputs = model_and_inputs(name)
    clock = _Clock()
    graphs: list[Any] = []
    op_counts: list[int] = []
    if backend == "max":
        compiler, graphs = _instrumented_max(clock)
        _count_graph_ops(op_counts)
    else:
        compiler = _peer_backend(clock)
    compiled = torch.compile(model, backend=compiler)
    figures: dict[str, Any] = {"model": name, "backend": backend}
    with torch.no_grad():
        rewind(inputs)
        start = time.perf_counter()
        compiled(**inputs)
        figures["first_call_s"] = time.perf_counter() - start
        if backend == "max":
            # Steady state: a graph of summed products switches to MAX's
            # matmul once compiled (at once when an earlier run compiled it).
            from torch_max_backend import compile_stats, wait_compiled

            wait_compiled()
            figures["upgrades"] = compile_stats().product_upgrades
        _per_call(lambda: compiled(**inputs), warm, inputs)
        plain: list[float] = []
        layers: dict[str, list[float]] = {k: [] for k in (*clock.seconds, "whole")}
        per_round = max(calls // rounds, 1)
        for _ in range(rounds):
            plain += _per_call(lambda: compiled(**inputs), per_round, inputs)
            clock.on = True
            for _ in range(per_round):
                for key in clock.seconds:
                    clock.seconds[key] = 0.0
                layers["whole"] += _per_call(lambda: compiled(**inputs), 1, inputs)
                for key, seconds in clock.seconds.items():
                    layers[key].append(seconds)
            clock.on = False
        _per_call(lambda: model(**inputs), warm, inputs)
        eager = _per_call(lambda: model(**inputs), calls, inputs)
    figures["call_ms"] = statistics.median(plain) * 1e3
    figures["eager_ms"] = statistics.median(eager) * 1e3
    figures["execute_ms"] = statistics.median(layers["execute"]) * 1e3
    if backend == "max":
        figures["graphs"] = len(graphs)
        figures["max_ops"] = op_counts
        figures["ms"] = {k: statistics.median(v) * 1e3 for k, v in layers.items()}
    return figures


# A MAX graph's text has one op a line: ``%1 = rmo.add(...)``, or an op
# without results; the graph's own header and ``mo.output`` are not counted.
_OP_LINE = re.compile(
    r"^\s*(?:%[^=]*=\s*)?\"?(?!mo\.(?:output|graph)\b)[a-z]+\.[\w.]+", re.M
)


class _GraphOps(logging.Handler):
    """Counts the ops of each MAX graph our backend logs as it builds it."""

    def __init__(self, counts: list[int]) -> None:
        super().__init__(logging.DEBUG)
        self.counts = counts

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("torch-max-backend: MAX graph"):
            self.counts.append(len(_OP_LINE.findall(str(record.args[1]))))


def _count_graph_ops(counts: list[int]) -> None:
    """Has each MAX graph built (a warm start skips building it when nobody
    reads the graphs' log) and its ops counted into ``counts``."""
    log = logging.getLogger("torch_max_backend.graphs")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(_GraphOps(counts))


def describe(figures: dict[str, Any]) -> list[str]:
    """The figures as lines of text."""
    lines = [
        f"{figures['model']} ({figures['backend']}): call {figures['call_ms']:.3f} ms,"
        f" eager {figures['eager_ms']:.3f} ms, first call {figures['first_call_s']:.1f} s"
    ]
    if "ms" not in figures and "execute_ms" in figures:  # the peer's
        lines.append(f"  MAX execute {figures['execute_ms']:.3f} ms")
    ms = figures.get("ms")
    if ms:
        parts = {
            "outside our backend (Dynamo)": ms["whole"] - ms["backend"],
            "AOTAutograd's wrapper": ms["backend"] - ms["graph"],
            "our call path": ms["graph"] - ms["execute"],
            "MAX execute": ms["execute"],
        }
        lines.append(
            f"  instrumented call {ms['whole']:.3f} ms over {figures['graphs']} MAX"
            f" graph(s); ops of each MAX graph built"
            f" {', '.join(map(str, figures['max_ops']))}"
            f" ({figures['upgrades']} switched from sums to matmuls):"
        )
        for label, value in parts.items():
            lines.append(f"    {label:28s} {value:7.3f} ms  {value / ms['whole']:5.1%}")
    return lines
