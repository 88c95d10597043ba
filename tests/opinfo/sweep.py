"""Machinery of the OpInfo sweep: cases, ATen tracing, batching, comparison.

An OpInfo entry becomes a ``Case``: its float32 samples, each wrapped as a
function of its tensor leaves. Tracing a case through AOTAutograd with
PyTorch's core decompositions tells whether it maps onto core ATen ops, and
building (not compiling) our MAX graph for it catches unsupported ops and
lowering errors in milliseconds. Numerical checks then compile many cases
into one function, since each MAX compile costs 15-90 s here.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
import torch.testing._internal.common_utils as common_utils
import torch.testing._internal.opinfo.core as opinfo_core
from graph_text import foldable_ops
from torch._functorch.aot_autograd import aot_function
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._pytree import tree_flatten, tree_unflatten

from torch_max_backend.lower.builder import build_graph
from torch_max_backend.lower.coverage import core_overloads
from torch_max_backend.lower.registry import (
    MAPPING_TORCH_ATEN_TO_MAX,
    core_and_extra_decompositions,
    decomposition_table,
)

# ATen ops whose results are random: compared by shape and dtype only.
RANDOM_OPS = {
    "aten.rand.default",
    "aten.rand_like.default",
    "aten.randn.default",
    "aten.randn_like.default",
    "aten.randperm.default",
    "aten.native_dropout.default",
    "aten.uniform.default",
    "aten.normal_functional.default",
    "aten.normal.Tensor_float",
    "aten.normal.float_Tensor",
    "aten.normal.Tensor_Tensor",
    "aten.bernoulli.p",
    "aten.exponential.default",
}

# Cases whose outputs are uninitialized memory in eager PyTorch: their values
# are unspecified, so only shape and dtype can be compared.
UNINITIALIZED_CASES = {
    "empty",
    "empty_like",
    "empty_permuted",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
}


# View ops: when a graph's output is a view of its input, AOTAutograd replays
# the view on the caller's tensor instead of asking the backend for it.
VIEW_OPS = {
    "aten.alias.default",
    "aten.as_strided.default",
    "aten.diagonal.default",
    "aten.expand.default",
    "aten.permute.default",
    "aten.select.int",
    "aten.slice.Tensor",
    "aten.squeeze.dim",
    "aten.squeeze.dims",
    "aten.t.default",
    "aten.transpose.int",
    "aten.unsqueeze.default",
    "aten.view.default",
}


@dataclass
class Sample:
    """One OpInfo sample as a function of its tensor leaves."""

    fn: Callable[..., tuple[torch.Tensor, ...]]
    tensors: list[torch.Tensor]

    def inputs(self) -> list[torch.Tensor]:
        # Fresh copies: some samples mutate their inputs.
        return [t.clone() for t in self.tensors]


@dataclass
class Case:
    name: str
    samples: list[Sample]
    aten_ops: set[str] = field(default_factory=set)
    # The ATen ops of the graphs our build saw (with our decompositions).
    built_ops: set[str] = field(default_factory=set)
    problem: str | None = None  # why the case cannot be compiled, if it can't
    # Ops of its MAX graphs that MAX would evaluate at compile time.
    foldable: list[str] = field(default_factory=list)


def _tensor_outputs(value: Any) -> tuple[torch.Tensor, ...]:
    leaves, _ = tree_flatten(value)
    return tuple(t for t in leaves if isinstance(t, torch.Tensor))


def _sample(op: Callable[..., Any], sample: Any) -> Sample | None:
    leaves, spec = tree_flatten(((sample.input, *sample.args), sample.kwargs))
    where = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    if not where:
        return None

    def fn(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        filled = list(leaves)
        for i, t in zip(where, tensors, strict=True):
            filled[i] = t
        args, kwargs = tree_unflatten(filled, spec)
        return _tensor_outputs(op(*args, **kwargs))

    return Sample(fn, [leaves[i] for i in where])


def case_name(entry: Any) -> str:
    return entry.name + (
        f".{entry.variant_test_name}" if entry.variant_test_name else ""
    )


def quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Silence the deprecation warnings that many OpInfo ops raise when called."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)

    return wrapper


def _call(op: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return op(*args, **kwargs)


@functools.cache
@quiet
def all_cases(
    max_samples: int, names: frozenset[str] | None = None
) -> tuple[Case, ...]:
    """Every OpInfo entry with float32 samples, up to ``max_samples`` each
    (only the entries ``names`` lists, when given)."""
    import torch.testing._internal.common_methods_invocations as opinfo

    # OpInfo runs random ops inside wrapper_set_seed, whose freeze_rng_state
    # Dynamo does not trace: every such case would break the batch's graph.
    # Random outputs are compared by shape and dtype only, so the seeding is
    # not needed; the lambdas look the wrapper up at call time.
    opinfo.wrapper_set_seed = _call
    # OpInfo looks for the running unittest method by crawling the stack
    # (inspect.stack, about 40 ms a call, twice per entry); there is none here.
    with (
        mock.patch.object(common_utils, "extract_test_fn", lambda: None),
        mock.patch.object(opinfo_core, "extract_test_fn", lambda: None),
    ):
        return _collect(max_samples, names)


def _collect(max_samples: int, names: frozenset[str] | None) -> tuple[Case, ...]:
    import torch.testing._internal.common_methods_invocations as opinfo

    cases = []
    for entry in opinfo.op_db:
        if torch.float32 not in entry.supported_dtypes("cpu"):
            continue
        if names is not None and case_name(entry) not in names:
            continue
        torch.manual_seed(0)
        samples = []
        try:
            for s in entry.sample_inputs("cpu", torch.float32, requires_grad=False):
                made = _sample(entry.op, s)
                if made is not None:
                    samples.append(made)
                if len(samples) >= max_samples:
                    break
        except Exception:  # a sample generator that needs what we lack
            continue
        if samples:
            cases.append(Case(case_name(entry), samples))
    return tuple(cases)


@quiet
def trace(
    fn: Callable[..., Any],
    args: Sequence[torch.Tensor],
    decompositions: dict[Any, Any],
    check: Callable[[torch.fx.GraphModule], None] | None = None,
) -> list[torch.fx.GraphModule]:
    """The functionalized ATen graph(s) AOTAutograd makes of ``fn(*args)``."""
    graphs = []

    def compiler(gm: torch.fx.GraphModule, _: Any) -> torch.fx.GraphModule:
        graphs.append(gm)
        if check is not None:
            with unset_fake_temporarily():
                check(gm)
        return gm

    with torch.no_grad():
        aot_function(fn, fw_compiler=compiler, decompositions=decompositions)(*args)
    return graphs


def ops_of(graphs: Sequence[torch.fx.GraphModule]) -> set[str]:
    return {
        str(n.target)
        for gm in graphs
        for n in gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    }


@functools.cache
def _core_names() -> frozenset[str]:
    return frozenset(str(op) for op in core_overloads())


def _lowered_names() -> frozenset[str]:
    return frozenset(str(op) for op in MAPPING_TORCH_ATEN_TO_MAX)


@functools.cache
def _core_decompositions() -> dict[Any, Any]:
    # torch's core table and the few we add (each ends in ops we lower).
    return core_and_extra_decompositions()


def maps_onto_core(case: Case) -> bool:
    """Whether PyTorch's core decompositions (and the few the registry adds)
    turn the case into core ops only, or into ops that are not core but that
    we lower (as_strided_scatter, max over all elements)."""
    try:
        sample = case.samples[0]
        graphs = trace(sample.fn, sample.inputs(), _core_decompositions())
    except Exception:
        return False
    case.aten_ops = ops_of(graphs)
    return bool(case.aten_ops) and case.aten_ops <= _core_names() | _lowered_names()


def build_problem(case: Case) -> str | None:
    """Why our MAX graph cannot be built for a sample of the case, if it can't."""

    def check(gm: torch.fx.GraphModule) -> None:
        case.built_ops |= ops_of([gm])
        case.foldable += foldable_ops(str(build_graph(gm).graph))

    for i, sample in enumerate(case.samples):
        try:
            trace(sample.fn, sample.inputs(), decomposition_table(), check=check)
        except Exception as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            return f"sample {i}: {type(e).__name__}: {' | '.join(lines[:3])[:400]}"
    return None


def batch_function(
    cases: Sequence[Case],
) -> tuple[
    Callable[..., tuple[torch.Tensor, ...]], list[torch.Tensor], list[tuple[str, int]]
]:
    """One function running every sample of ``cases``; which outputs are whose."""
    parts: list[tuple[Sample, int]] = []
    inputs: list[torch.Tensor] = []
    owners: list[tuple[str, int]] = []
    for case in cases:
        for i, sample in enumerate(case.samples):
            parts.append((sample, len(sample.tensors)))
            inputs.extend(sample.tensors)
            owners.append((case.name, i))

    def batch(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs: list[torch.Tensor] = []
        at = 0
        for sample, n in parts:
            outputs.extend(sample.fn(*tensors[at : at + n]))
            at += n
        return tuple(outputs)

    return batch, inputs, owners


@dataclass
class Mismatch:
    case: str
    sample: int
    message: str


def compare(
    owners: Sequence[tuple[str, int]],
    cases: Sequence[Case],
    got: Sequence[torch.Tensor],
    expected: Sequence[torch.Tensor],
    tolerances: dict[str, tuple[float, float]],
    default: tuple[float, float],
) -> list[Mismatch]:
    """Outputs of a batch against eager, attributed to their cases."""
    by_name = {c.name: c for c in cases}
    mismatches = []
    # Outputs are laid out in sample order; recover each sample's count by
    # running eager per sample (cheap) rather than trusting lengths.
    at = 0
    for name, index in owners:
        case = by_name[name]
        sample = case.samples[index]
        n = len(sample.fn(*sample.inputs()))
        rtol, atol = tolerances.get(name, default)
        unspecified = bool(case.aten_ops & RANDOM_OPS) or name in UNINITIALIZED_CASES
        for k in range(n):
            g, e = got[at + k], expected[at + k]
            try:
                if unspecified:
                    assert g.shape == e.shape and g.dtype == e.dtype, (
                        f"unspecified output: {g.shape} {g.dtype} vs {e.shape} {e.dtype}"
                    )
                else:
                    torch.testing.assert_close(
                        g, e, rtol=rtol, atol=atol, equal_nan=True
                    )
            except AssertionError as err:
                message = str(err).strip().splitlines()
                mismatches.append(
                    Mismatch(name, index, f"output {k}: " + " ".join(message[:4]))
                )
        at += n
    return mismatches


def batch_mismatches(
    cases: Sequence[Case],
    tolerances: dict[str, tuple[float, float]],
    default: tuple[float, float],
) -> list[str]:
    """Compile every sample of ``cases`` as one strict, full graph and compare
    it with eager; one line per output that differs."""
    from torch_max_backend import max_backend

    fn, inputs, owners = batch_function(cases)
    expected = fn(*[x.clone() for x in inputs])
    # One graph per batch: a graph break would recompile the shared sample
    # wrapper per case, turn on automatic dynamic shapes and hide cases in
    # eager fallbacks.
    compiled = torch.compile(
        fn, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    got = compiled(*[x.clone() for x in inputs])
    if len(got) != len(expected):
        return [f"{len(got)} outputs, eager gives {len(expected)}"]
    return [
        f"{m.case} sample {m.sample}: {m.message}"
        for m in compare(owners, cases, got, expected, tolerances, default)
    ]
