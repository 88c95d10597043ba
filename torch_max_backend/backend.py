"""The ``torch.compile`` entry point: Dynamo graph -> AOTAutograd -> MAX.

Registered as ``backend="max"`` through the ``torch_dynamo_backends`` entry
point in pyproject.toml.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import logs
from .background import Finish, compile_in_background, compiled_together
from .deferred import FirstCallWaits, once, when_all_done
from .errors import MaxCompilerError, first_line
from .fallback import FallbackWarning, Placement, needs_torch, settle, start_split
from .fallback import warn as warn_fallback
from .graph_builds import GraphBuilds, caller_outputs
from .logs import show_on_stderr
from .lower.builder import (
    CallerOutputs,
    check_supported,
    computes_nothing,
    graph_fingerprint,
    without_repeats,
)
from .lower.families import register_families
from .lower.product_choice import set_product_strategy
from .lower.registry import decomposition_table
from .plan import GraphPlan
from .product_upgrade import start_upgrade
from .runtime import huge_pages, torch_threads
from .runtime.compile_workers import worker_count
from .runtime.compiled_graph import CompiledGraph
from .runtime.module_batch import alone, gathered, gathering
from .runtime.profile import GraphStats, ProfiledCompiledGraph
from .runtime.progress import compile_progress, wanted
from .runtime.session import compile_graph_async
from .runtime.stats import add_pending
from .settings import Settings, check_mode
from .warm_start import remember, start_warm

_graph_ids = itertools.count()
_graphs_log = logs.get_logger("graphs")
_compile_log = logs.get_logger("compile")


def compile_aten_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    *,
    settings: Settings,
    kind: str,
) -> Callable[[list], list]:
    """Compile one ATen graph (forward, backward or inference) to a MAX callable.

    A graph with ops MAX cannot run, or whose lowering fails on some node, is
    split: its supported blocks run on MAX and the rest in PyTorch. A graph
    MAX's compiler rejects runs in PyTorch. ``settings.strict`` raises instead.
    """
    name = f"{kind}_{next(_graph_ids)}"
    if computes_nothing(gm):
        # Views of its inputs only, such as the ``return loss.detach()`` Dynamo
        # resumes a training step with after ``optimizer.step()``: AOTAutograd
        # replays views of inputs on the caller's tensors, so PyTorch runs it
        # for free, where MAX would cost a build and a 20 s compile.
        _graphs_log.debug("torch-max-backend: graph %s computes nothing: PyTorch", name)
        return make_boxed_func(gm.forward)
    # Before the fingerprint: a warm start plans the graph that was built.
    gm = without_repeats(gm)
    if settings.strict and needs_torch(gm, Placement(settings)):
        check_supported([gm])
    if settings.verbose:
        show_on_stderr("graphs", logging.DEBUG)
    if _graphs_log.isEnabledFor(logging.DEBUG):
        _graphs_log.debug(
            "torch-max-backend: ATen graph %s:\n%s",
            name,
            gm.print_readable(print_output=False),
        )
    worker_count(settings.compile_workers)  # the first compile fixes it
    layouts = caller_outputs(kind)
    fingerprint = graph_fingerprint(gm, layouts, settings.summed_products)
    # Whoever reads the MAX graphs (verbose) gets them built, not skipped.
    if fingerprint is not None and not _graphs_log.isEnabledFor(logging.DEBUG):
        warm = start_warm(gm, fingerprint, settings)
        if warm is not None:
            compiled = _compiled_graph(
                warm.plan,
                warm.constants,
                settings,
                name,
                (warm.model, warm.token, True, warm.seconds),
            )
            start_upgrade(
                GraphBuilds(gm, layouts, settings.summed_products),
                gm,
                compiled,
                warm.plan,
                warm.largest_sum,
                fingerprint,
                settings,
            )
            return compiled
    if settings.background_compile:
        return compile_in_background(
            name,
            gm,
            lambda copied: _start_compile(
                copied, settings, name, fingerprint, eager_layouts=layouts
            ),
            strict=settings.strict,
            verbose=settings.verbose,
        )
    add_pending(1)
    if gathering() and kind != "inference":
        # max_backend gathers a step's forward and backward into one MAX
        # module, compiled once both are handed over: wait at the first call.
        # Pending until the module is compiled, called or not.
        settled = once(lambda: add_pending(-1))
        try:
            with gathered():
                return FirstCallWaits(
                    _start_compile(
                        gm, settings, name, fingerprint, settled, eager_layouts=layouts
                    )
                )
        except BaseException:
            settled()
            raise
    try:
        with alone():  # no backward follows: nothing to gather it with
            return _compile(gm, settings, name, fingerprint, layouts)
    finally:
        add_pending(-1)


def _compile(
    gm: torch.fx.GraphModule,
    settings: Settings,
    name: str,
    fingerprint: str | None,
    eager_layouts: CallerOutputs | None,
) -> Callable[[list], list]:
    """``gm`` on MAX: whole, split around ops that run in PyTorch (its blocks
    compiled together as one module), or (when MAX cannot take it and not
    ``strict``) in PyTorch."""
    with gathered():
        finish = _start_compile(
            gm, settings, name, fingerprint, eager_layouts=eager_layouts
        )
    return finish()


def _start_compile(
    gm: torch.fx.GraphModule,
    settings: Settings,
    name: str,
    fingerprint: str | None,
    when_ready: Callable[[], None] = lambda: None,
    eager_layouts: CallerOutputs | None = None,
) -> Finish:
    """Build ``gm`` and start compiling it; the returned function waits for
    the compile and gives the callable (``_compile`` in two halves, so that
    several graphs' compiles can be started, and gathered, before any wait).
    A whole graph compiled is recorded under ``fingerprint`` (warm_start.py).
    ``when_ready`` is called once every compile started here is over."""
    placement = Placement(settings)
    builds = GraphBuilds(gm, eager_layouts, settings.summed_products)
    try:
        whole = settle(gm, placement, builds.build)
    except MaxCompilerError as e:
        if settings.strict:
            raise
        refused = e
        when_ready()
        return lambda: _in_pytorch(gm, name, refused)
    if whole is None:
        blocks: list[Future] = []

        def start_block(block: torch.fx.GraphModule, block_name: str) -> Future:
            blocks.append(_start_max(block, builds, settings, block_name))
            return blocks[-1]

        finish_split = start_split(gm, placement, name, start_block)
        when_all_done(blocks, when_ready)

        def finish_blocks() -> Callable[[list], list]:
            split, report = finish_split()
            warn_fallback(report, settings)
            return make_boxed_func(split.forward)

        return finish_blocks
    ready = _start_max(gm, builds, settings, name, fingerprint)
    when_all_done([ready], when_ready)

    def finish_whole() -> Callable[[list], list]:
        try:
            return _wait(ready, gm, settings, name)
        except MaxCompilerError as e:
            if settings.strict:
                raise
            return _in_pytorch(gm, name, e)

    return finish_whole


def _in_pytorch(
    gm: torch.fx.GraphModule, name: str, error: MaxCompilerError
) -> Callable[[list], list]:
    """The whole ATen graph run by PyTorch, after MAX could not take it."""
    logs.warn(
        f"torch-max-backend: graph {name} runs in PyTorch: {first_line(error)} "
        "Pass options={'strict': True} to raise instead.",
        FallbackWarning,
        logger="fallback",
        stacklevel=2,
    )
    return make_boxed_func(gm.forward)


def _start_max(
    gm: torch.fx.GraphModule,
    builds: GraphBuilds,
    settings: Settings,
    name: str,
    fingerprint: str | None = None,
) -> Future[CompiledGraph]:
    """Start compiling one ATen graph, every op of which MAX can run, as one
    MAX graph (built by ``builds``); the future raises ``MaxCompilerError``
    when MAX refuses it. With a ``fingerprint``, the compiled graph is
    recorded under it. A graph of summed products starts its upgrade to
    MAX's matmul once running (product_upgrade.py)."""
    built = builds.build(gm)
    if _graphs_log.isEnabledFor(logging.DEBUG):
        _graphs_log.debug("torch-max-backend: MAX graph %s:\n%s", name, built.graph)
    start = time.perf_counter()
    ready: Future[CompiledGraph] = Future()
    nodes = len(gm.graph.nodes)

    def finish(loaded: Future | None) -> None:
        model = token = None
        cached = True
        try:
            if loaded is not None:
                try:
                    model, record, token = loaded.result()
                except Exception as e:
                    raise MaxCompilerError(
                        f"MAX failed to compile graph {name} ({nodes} FX nodes) "
                        f"for {built.device}: {type(e).__name__}: {e}\n"
                        "Set TORCH_MAX_BACKEND_VERBOSE=1 to print the graphs."
                    ) from e
                cached = record.cached
                if fingerprint is not None:
                    remember(fingerprint, built, record)
            seconds = time.perf_counter() - start
            compiled = _compiled_graph(
                built.plan,
                built.constants,
                settings,
                name,
                (model, token, cached, seconds),
            )
            if model is not None:
                start_upgrade(
                    builds,
                    gm,
                    compiled,
                    built.plan,
                    built.largest_sum,
                    fingerprint,
                    settings,
                )
            ready.set_result(compiled)
        except BaseException as e:
            ready.set_exception(e)

    # A graph that returns nothing and writes nothing (its outputs are inputs,
    # sizes or constants) needs no MAX model at all.
    if built.plan.num_graph_outputs or built.plan.mutated:
        compile_graph_async(
            built.graph, built.device, keep=settings.max_cached_graphs
        ).add_done_callback(finish)
    else:
        finish(None)
    return ready


def _wait(
    ready: Future[CompiledGraph],
    gm: torch.fx.GraphModule,
    settings: Settings,
    name: str,
) -> CompiledGraph:
    """The compiled graph, with the progress line while it compiles."""
    ops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    label = f"graph {name} ({ops} ATen ops)"
    with compile_progress(label, enabled=not ready.done() and wanted(settings.verbose)):
        return ready.result()


def _compiled_graph(
    plan: GraphPlan,
    constants: list[torch.Tensor],
    settings: Settings,
    name: str,
    loaded: tuple[object, object, bool, float],
) -> CompiledGraph:
    """The callable of one MAX graph; ``loaded`` is its model, the token
    keeping it loaded, whether it was found in this process, and the
    seconds it took to get."""
    model, token, cached, seconds = loaded
    if settings.profile:
        show_on_stderr("compile", logging.INFO)
        show_on_stderr("profile", logging.INFO)
    _compile_log.info("torch-max-backend: compiled %s in %.2fs", name, seconds)
    huge_pages.set_enabled(settings.huge_pages)
    if settings.quiet_torch_threads and plan.device.startswith("cpu"):
        torch_threads.quiet()
    with unset_fake_temporarily():
        if settings.profile:
            compiled: CompiledGraph = ProfiledCompiledGraph(
                name,
                model,
                plan,
                constants,
                GraphStats(name, seconds, cached),
                settings.max_cached_graphs,
            )
        else:
            compiled = CompiledGraph(name, model, plan, constants)
    # The model stays loaded while this compiled graph can still run it.
    compiled.keeps_model = token
    return compiled


def _checked_partition(
    joint: torch.fx.GraphModule,
    joint_inputs: Any,
    *,
    strict: bool,
    **kwargs: Any,
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    # In strict mode, check forward and backward together before anything
    # compiles, so that one error lists every unsupported op of the step.
    if strict:
        check_supported([joint])
    # The min-cut partitioner saves weights, not their transposes, for the
    # backward pass and recomputes cheap ops there: a forward graph that returned
    # each transposed weight made MAX write it out at every step (MLP training
    # step 17.1 -> 11.9 ms, its forward graph 8.9 -> 3.6 ms).
    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


def max_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    options: object = None,
    mode: str | None = None,
) -> Callable[..., Any]:
    """A ``torch.compile`` backend running the model on MAX.

    ``torch.compile(model, backend=max_backend, options={"verbose": True})``;
    see ``Settings`` for the options and their environment variables, and
    ``settings.MODES`` for what torch.compile's ``mode`` means here.
    """
    check_mode(mode)
    register_families()
    settings = Settings.resolve(options, mode)
    set_product_strategy(settings.product_strategy)
    compiler = functools.partial(compile_aten_graph, settings=settings)
    backend = aot_autograd(
        fw_compiler=functools.partial(compiler, kind="forward"),
        bw_compiler=functools.partial(compiler, kind="backward"),
        inference_compiler=functools.partial(compiler, kind="inference"),
        decompositions=decomposition_table(),
        partition_fn=functools.partial(_checked_partition, strict=settings.strict),
        keep_inference_input_mutations=True,
    )
    # The backward's compile starts with the forward's, instead of at the
    # first backward: both compile as one MAX module, in the background
    # while the step runs in PyTorch, or else before the first call returns.
    together = compiled_together() if settings.background_compile else gathered()
    with (
        torch._functorch.config.patch(force_non_lazy_backward_lowering=True),
        together,
    ):
        return backend(gm, example_inputs)
