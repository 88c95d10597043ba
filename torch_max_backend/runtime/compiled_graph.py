"""The callable AOTAutograd receives: torch tensors in, MAX execute, torch tensors out.

This is the per-call hot path. Everything that can be decided at compile time
(which argument feeds which MAX input, constants already on the device as MAX
buffers, how outputs are assembled) is decided in ``__init__``; ``__call__``
only wraps, executes and unwraps. It is exempt from runtime type checks.
"""

from __future__ import annotations

import atexit
import time
import weakref
from dataclasses import dataclass
from typing import Any, no_type_check

import torch
from max.driver import Buffer
from max.engine import Model
from tabulate import tabulate

from ..lowering.graph_builder import SEED, BuiltGraph, OutputSlot
from .stats import compile_stats

_from_dlpack = Buffer._from_dlpack
_to_torch = torch.from_dlpack
# On the CPU there is no stream to hand over, so an output's DLPack capsule
# goes to torch as it is: torch.from_dlpack's negotiation (device query,
# versioned call, retried when MAX refuses the keyword) costs ~3 us a tensor.
_from_capsule = torch.utils.dlpack.from_dlpack
_bump_versions = torch.autograd.graph.increment_version

# Output assembly codes, compared as small ints in the hot loop.
_GRAPH, _INPUT, _DIM, _CONST, _EXPR = range(5)
_CODES = {
    "graph": _GRAPH,
    "input": _INPUT,
    "dim": _DIM,
    "const": _CONST,
    "expr": _EXPR,
}


def _as_buffer(tensor: torch.Tensor) -> Buffer:
    if tensor.requires_grad:
        tensor = tensor.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return _from_dlpack(tensor)


class CompiledGraph:
    """Runs one compiled MAX model with AOTAutograd's boxed calling convention."""

    def __init__(self, name: str, model: Model | None, built: BuiltGraph) -> None:
        # An instance attribute, not a class one: Dynamo's wrappers copy the
        # instance __dict__ and AOTAutograd looks for this flag on them.
        self._boxed_call = True
        self.name = name
        self._execute = None if model is None else model._execute_device_tensors
        # Constants (graph attributes, lifted scalars) become MAX buffers once.
        self._plan: list[int | Buffer | object] = [
            source if isinstance(source, int) or source is SEED else _as_buffer(source)
            for source in built.inputs
        ]
        self._keep_alive = [s for s in built.inputs if isinstance(s, torch.Tensor)]
        self._device = built.device
        self._outputs: list[tuple[int, int, int, Any]] = [
            _slot_code(slot) for slot in built.outputs
        ]
        # Inputs MAX writes in place; torch's version counters must see it.
        self._mutated = built.mutated
        self._on_cpu = built.device.type == "cpu"
        # The common case, MAX's results returned as they are, skips the
        # output assembly loop (~2 us a call).
        self._results_only = (
            not self._mutated
            and len(self._outputs) == built.num_graph_outputs
            and all(
                code == _GRAPH and index == i
                for i, (code, index, _, _) in enumerate(self._outputs)
            )
        )
        # Per tensor input: (weakref to the tensor last seen, its data pointer,
        # the MAX buffer wrapping it or None). Wrapping costs ~10 us, reuse
        # ~0.3 us. A buffer is kept only for tensors that persist across calls
        # (parameters, or the same tensor seen twice in a row), so that
        # per-call inputs are never held alive. The buffer aliases the
        # tensor's memory: in-place updates (an optimizer step) stay visible.
        self._seen: list[tuple[Any, int, Buffer | None] | None] = [None] * len(
            self._plan
        )

    @no_type_check
    def _buffers(self, args: list) -> list:
        buffers = []
        seen = self._seen
        for slot, item in enumerate(self._plan):
            if item.__class__ is not int:
                if item is SEED:
                    item = _from_dlpack(
                        torch.randint(
                            0, 2**62, (1,), dtype=torch.int64, device=self._device
                        )
                    )
                buffers.append(item)
                continue
            tensor = args[item]
            entry = seen[slot]
            if (
                entry is not None
                and entry[0]() is tensor
                and entry[1] == tensor.data_ptr()
            ):
                if entry[2] is not None:
                    buffers.append(entry[2])
                    continue
                persistent = True  # second call in a row with this tensor
            else:
                persistent = tensor.__class__ is torch.nn.Parameter
            buffer = _as_buffer(tensor)
            if tensor.is_contiguous():
                seen[slot] = (
                    weakref.ref(tensor),
                    tensor.data_ptr(),
                    buffer if persistent else None,
                )
            buffers.append(buffer)
        return buffers

    @no_type_check
    def _results(self, args: list) -> list:
        if self._execute is None:
            return []
        buffers = self._execute(self._buffers(args))
        if self._on_cpu:
            return [_from_capsule(b.__dlpack__()) for b in buffers]
        return [_to_torch(b) for b in buffers]

    @no_type_check
    def __call__(self, args: list) -> list:
        if self._results_only:
            results = self._results(args)
            args.clear()
            return results
        staged = self._stage_mutated(args) if self._mutated else None
        results = self._results(args)
        if self._mutated:
            if staged:
                for index, original in staged:
                    original.copy_(args[index])
                    args[index] = original
            _bump_versions([args[i] for i in self._mutated])
        outputs = []
        for code, index, dim, value in self._outputs:
            if code == _GRAPH:
                outputs.append(results[index])
            elif code == _INPUT:
                outputs.append(args[index])
            elif code == _DIM:
                outputs.append(args[index].shape[dim])
            elif code == _EXPR:
                outputs.append(value(args))
            else:
                outputs.append(value)
        args.clear()
        return outputs

    def _stage_mutated(self, args: list) -> list[tuple[int, torch.Tensor]]:
        """A contiguous stand-in for each mutated input that is not contiguous.

        MAX writes a mutated input through the memory it was handed; a strided
        tensor is handed as a contiguous copy, so that copy is written instead
        and copied back after the call. Returns (index, original) pairs.
        """
        staged = []
        for index in self._mutated:
            tensor = args[index]
            if not tensor.is_contiguous():
                staged.append((index, tensor))
                args[index] = tensor.contiguous()
        return staged


def _slot_code(slot: OutputSlot) -> tuple[int, int, int, Any]:
    return (_CODES[slot.kind], slot.index, slot.dim, slot.value)


@dataclass
class GraphStats:
    name: str
    compile_seconds: float
    compile_cached: bool
    calls: int = 0
    run_seconds: float = 0.0


PROFILE: list[GraphStats] = []


class ProfiledCompiledGraph(CompiledGraph):
    """A CompiledGraph that also times each call, for TORCH_MAX_BACKEND_PROFILE."""

    def __init__(
        self, name: str, model: Model | None, built: BuiltGraph, stats: GraphStats
    ) -> None:
        super().__init__(name, model, built)
        self.stats = stats
        if not PROFILE:
            atexit.register(print_profile)
        PROFILE.append(stats)

    @no_type_check
    def __call__(self, args: list) -> list:
        start = time.perf_counter()
        outputs = super().__call__(args)
        self.stats.run_seconds += time.perf_counter() - start
        self.stats.calls += 1
        return outputs


def profile_table() -> str:
    rows = [
        [
            s.name,
            f"{s.compile_seconds:.2f}" + (" (cached)" if s.compile_cached else ""),
            s.calls,
            f"{s.run_seconds * 1e3:.3f}",
            f"{s.run_seconds / s.calls * 1e6:.1f}" if s.calls else "-",
        ]
        for s in PROFILE
    ]
    return tabulate(
        rows,
        headers=["graph", "compile s", "calls", "run total ms", "run mean us"],
    )


def print_profile() -> None:
    if PROFILE:
        s = compile_stats()
        print(
            "torch-max-backend profile:\n"
            + profile_table()
            + f"\n{s.graphs_built} graph(s) built in {s.build_seconds:.2f}s; "
            f"{s.max_compiles} MAX compile(s) in {s.compile_seconds:.2f}s "
            f"({s.disk_cache_hits} from MAX's disk cache); "
            f"{s.cache_hits} in-process cache hit(s)"
        )
