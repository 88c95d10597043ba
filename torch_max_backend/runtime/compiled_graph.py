"""The callable AOTAutograd receives: torch tensors in, MAX execute, torch tensors out.

This is the per-call hot path. Everything that can be decided at compile time
(which argument feeds which MAX input, constants already on the device as MAX
buffers, how outputs are assembled) is decided in ``__init__``; ``__call__``
only wraps, executes and unwraps. It is exempt from runtime type checks.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from typing import Any, no_type_check

import torch
from max.driver import Buffer
from max.engine import Model

from ..plan import (
    GraphPlan,
    InputKind,
    InputSource,
    RuntimeCheck,
)
from . import huge_pages, max_workers
from .input_markers import (
    LAST_FORMAT,
    SEED,
    TO_LAST,
    ChannelsLastView,
    IntCarrier,
    IntValue,
)
from .output_codes import DIM, EXPR, GRAPH, INPUT, STRIDED, laid_out, slot_code
from .packed_weights import PackedWeight

_from_dlpack = Buffer._from_dlpack
_to_torch = torch.from_dlpack
# On the CPU there is no stream to hand over, so an output's DLPack capsule
# goes to torch as it is: torch.from_dlpack's negotiation (device query,
# versioned call, retried when MAX refuses the keyword) costs ~3 us a tensor,
# and torch.utils.dlpack.from_dlpack, given a capsule, only checks its
# keywords in Python before calling this.
_from_capsule = torch._C._from_dlpack
_bump_versions = torch.autograd.graph.increment_version
_read_bytes = ctypes.string_at
_to_capsule = torch._C._to_dlpack
# DLPack's (device type, index) of host memory: kDLCPU is 1.
_DLPACK_CPU = (1, 0)
# Classes whose __dlpack__ is torch's own (a subclass may override it or
# route it through __torch_function__, so it keeps torch's path).
_PLAIN_TENSORS = frozenset({torch.Tensor, torch.nn.Parameter})
_STRIDED_LAYOUT = torch.strided


class _CpuExport:
    """What MAX's ``Buffer._from_dlpack`` reads from a dense CPU tensor: the
    capsule torch's ``Tensor.__dlpack__`` would make (MAX asks for the
    unversioned one) without that method's checks, written in Python, which
    cost about 5 us a tensor, most of a small graph's call. ``as_buffer``
    hands here only what passes those checks: no gradient, no conjugate bit,
    strided, a plain tensor or parameter on the CPU."""

    __slots__ = ("_capsule",)

    @no_type_check
    def __init__(self, tensor: torch.Tensor) -> None:
        self._capsule = _to_capsule(tensor)

    @no_type_check
    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._capsule

    @no_type_check
    def __dlpack_device__(self) -> tuple[int, int]:
        return _DLPACK_CPU


@no_type_check
def as_buffer(tensor: torch.Tensor) -> Buffer:
    """A MAX buffer sharing ``tensor``'s memory (a contiguous copy if it is strided)."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if (
        tensor.__class__ in _PLAIN_TENSORS
        and tensor.is_cpu
        and tensor.layout is _STRIDED_LAYOUT
        and not tensor.is_conj()
    ):
        return _from_dlpack(_CpuExport(tensor))
    return _from_dlpack(tensor)


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    start = tensor.data_ptr()
    return start, start + tensor.numel() * tensor.element_size()


def outputs_sharing_memory(
    results: Sequence[torch.Tensor], inputs: Sequence[Buffer]
) -> list[int]:
    """The results that lie in the memory of one of MAX's inputs, or of an
    earlier result.

    MAX returns an input's own buffer for an output it has nothing to compute
    for (a clone, a reshape of one, a constant the graph returns), and one
    buffer for two outputs it computes alike (``x.relu(), x.relu()``), where
    torch gives new tensors: a caller writing into one would change the
    input, the other output, or the constant every later call returns. Views
    of the caller's inputs are made views again by AOTAutograd from the input
    itself, so copying their results changes nothing they show.
    """
    spans = [_span(t) for t in map(_to_torch, inputs) if t.numel()]
    sharing = []
    for i, result in enumerate(results):
        if not result.numel():
            continue
        start, end = _span(result)
        if any(start < e and s < end for s, e in spans):
            sharing.append(i)
        else:
            spans.append((start, end))
    return sharing


class CompiledGraph:
    """Runs one compiled MAX model with AOTAutograd's boxed calling convention."""

    def __init__(
        self,
        name: str,
        model: Model | None,
        plan: GraphPlan,
        constants: Sequence[torch.Tensor] = (),
    ) -> None:
        # An instance attribute, not a class one: Dynamo's wrappers copy the
        # instance __dict__ and AOTAutograd looks for this flag on them.
        self._boxed_call = True
        self.name = name
        # MAX's execute, and the outputs it returns in an input's memory
        # (outputs_sharing_memory; None until the first call finds them):
        # one attribute, so that switch_model swaps both at once.
        self._run: tuple[Any, list[int] | None] = (
            None if model is None else model._execute_device_tensors,
            None,
        )
        # Constants (graph attributes, lifted scalars) become MAX buffers once.
        self._plan: list[int | Buffer | object] = [
            _input_item(source, constants) for source in plan.inputs
        ]
        self._keep_alive = list(constants)
        # Set by whoever loaded the model: keeps it in the process's model
        # table while this graph (or a copy of its attributes) lives.
        self.keeps_model: object = None
        self._device = torch.device(plan.device)
        self._outputs: list[tuple[int, int, int, Any]] = [
            slot_code(slot) for slot in plan.outputs
        ]
        # Inputs MAX writes in place; torch's version counters must see it.
        self._mutated = list(plan.mutated)
        self._channels_last = {
            s.index for s in plan.inputs if s.kind is InputKind.CHANNELS_LAST
        }
        # (input, output) pairs: inputs whose new value MAX returns instead.
        self._written_back = list(plan.written_back)
        # Inputs the graph refuses as eager does (lower/checks.py).
        self._checks = plan.checks
        self._check_output = plan.check_output
        self._on_cpu = self._device.type == "cpu"
        # The common case, MAX's results returned as they are, skips the
        # output assembly loop (~2 us a call).
        self._results_only = plan.results_only
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
            last = False
            if item.__class__ is ChannelsLastView:
                last, item = True, item.index
            elif item.__class__ is not int:
                if item.__class__ is IntCarrier:
                    size = (args[item.index], 0)
                    item = as_buffer(
                        torch.empty(size, dtype=torch.int8, device=self._device)
                    )
                elif item.__class__ is IntValue:
                    item = as_buffer(
                        torch.tensor(
                            args[item.index], dtype=torch.int64, device=self._device
                        )
                    )
                elif item.__class__ is PackedWeight:
                    item = item.buffer(args[item.index])
                elif item is SEED:
                    item = as_buffer(
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
            if last:
                # Dense, and its flat view no copy, unless the caller's
                # tensor is laid out otherwise than traced: then copied.
                laid = tensor.permute(TO_LAST[tensor.dim()])
                dense = laid.is_contiguous()
                laid = laid.flatten(1)
            else:
                laid, dense = tensor, tensor.is_contiguous()
            buffer = as_buffer(laid)
            if persistent and self._on_cpu:
                huge_pages.request(tensor)
            if dense:
                seen[slot] = (
                    weakref.ref(tensor),
                    tensor.data_ptr(),
                    buffer if persistent else None,
                )
            buffers.append(buffer)
        return buffers

    def switch_model(self, model: Model, keeps_model: object) -> None:
        """Later calls run ``model``, a compile of the same graph plan (the
        same inputs and outputs; pipeline/product_upgrade.py). Safe from another
        thread: a call in flight finishes on the model it started with."""
        self._run = (model._execute_device_tensors, None)
        self.keeps_model = keeps_model

    @no_type_check
    def _results(self, args: list) -> list:
        run = self._run
        execute, sharing = run
        if execute is None:
            return []
        inputs = self._buffers(args)
        if self._on_cpu and max_workers.enabled():
            # MAX's workers rest between long executes (runtime/max_workers.py).
            buffers = max_workers.run(execute, inputs)
        else:
            buffers = execute(inputs)
        if self._on_cpu:
            results = [_from_capsule(b.__dlpack__()) for b in buffers]
        else:
            results = [_to_torch(b) for b in buffers]
        if sharing is None:
            # Which outputs MAX returns in an input's memory is decided when
            # it compiles: found once per model, copied at every call.
            sharing = outputs_sharing_memory(results, inputs)
            if self._run is run:
                self._run = (execute, sharing)
        for i in sharing:
            results[i] = results[i].clone()
        return results

    @no_type_check
    def __call__(self, args: list) -> list:
        if self._results_only:
            results = self._results(args)
            args.clear()
            return results
        staged = self._stage_mutated(args) if self._mutated else None
        results = self._results(args)
        if self._checks and self._refused(results[self._check_output]):
            raise _refusal(results[self._check_output], self._checks)
        for index, output in self._written_back:
            args[index].copy_(results[output])
        if self._mutated:
            if staged:
                for index, original in staged:
                    original.copy_(args[index])
                    args[index] = original
            _bump_versions([args[i] for i in self._mutated])
        outputs = []
        for code, index, dim, value in self._outputs:
            if code == GRAPH:
                outputs.append(results[index])
            elif code == INPUT:
                outputs.append(args[index])
            elif code == DIM:
                outputs.append(args[index].shape[dim])
            elif code == EXPR:
                outputs.append(value(args))
            elif code == STRIDED:
                outputs.append(laid_out(results[index], *value(args)))
            else:
                outputs.append(value)
        args.clear()
        return outputs

    @no_type_check
    def _refused(self, flags: torch.Tensor) -> bool:
        """Whether a check's flag is set. A CPU graph's flags (a contiguous
        result of their own) are read as bytes where they lie: torch's any()
        is a reduction of its own, and numpy's view of them took 70-89 us
        after a decode step's execute had emptied the caches (the bytes read
        in place: 35-49 us)."""
        if self._on_cpu and flags.dtype is torch.bool:
            count = flags.numel()
            return _read_bytes(flags.data_ptr(), count) != bytes(count)
        return bool(flags.any())

    @no_type_check
    def _stage_mutated(self, args: list) -> list[tuple[int, torch.Tensor]]:
        """A contiguous stand-in for each mutated input that is not contiguous.

        MAX writes a mutated input through the memory it was handed; a strided
        tensor is handed as a contiguous copy, so that copy is written instead
        and copied back after the call. Returns (index, original) pairs.
        """
        staged = []
        for index in self._mutated:
            tensor = args[index]
            if index in self._channels_last:
                # Taken as its channels-last view: staged where that is no
                # view of its memory.
                rank = tensor.dim()
                if not tensor.permute(TO_LAST[rank]).is_contiguous():
                    staged.append((index, tensor))
                    args[index] = tensor.contiguous(memory_format=LAST_FORMAT[rank])
            elif not tensor.is_contiguous():
                staged.append((index, tensor))
                args[index] = tensor.contiguous()
        return staged


def _input_item(
    source: InputSource, constants: Sequence[torch.Tensor]
) -> int | Buffer | object:
    """What the hot loop reads for one MAX input: an FX input's index, a
    constant's buffer, a packed weight, or SEED."""
    kind, index = source.kind, source.index
    if kind is InputKind.FX_INPUT:
        return index
    if kind is InputKind.CHANNELS_LAST:
        return ChannelsLastView(index)
    if kind is InputKind.CONSTANT:
        huge_pages.request(constants[index])
        return as_buffer(constants[index])
    if kind is InputKind.INT:
        return IntCarrier(index)
    if kind is InputKind.NUMBER:
        return IntValue(index)
    if kind is InputKind.PACKED:
        return PackedWeight(index, source.packing, as_buffer)
    return SEED


def _refusal(flags: torch.Tensor, checks: Sequence[RuntimeCheck]) -> Exception:
    """The error of the first check whose flag is set, as eager raises it."""
    failed = checks[int(flags.to(torch.int8).argmax())]
    return failed.exception()
