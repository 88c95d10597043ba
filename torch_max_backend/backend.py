"""The ``torch.compile`` entry point: Dynamo graph -> AOTAutograd -> MAX.

Registered as ``backend="max"`` through the ``torch_dynamo_backends`` entry
point in pyproject.toml.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition

from . import logs
from .errors import MaxCompilerError
from .logs import show_on_stderr
from .lower.builder import (
    check_supported,
    computes_nothing,
    graph_fingerprint,
    rewritten,
)
from .lower.conv_choice import set_conv_strategy
from .lower.families import register_families
from .lower.packed_products import mark_frozen
from .lower.passes import without_unread_saves
from .lower.product_choice import set_product_strategy
from .lower.registry import decomposition_table
from .pipeline.background import Finish, compile_in_background, compiled_together
from .pipeline.compiling import (
    compiled_graph,
    in_pytorch,
    settle_timing,
    start_max,
    wait_for,
)
from .pipeline.deferred import (
    FirstCallWaits,
    backward_turn,
    forward_compiling,
    once,
    when_all_done,
)
from .pipeline.fallback import (
    Placement,
    needs_torch,
    settle,
    start_split,
)
from .pipeline.fallback import warn as warn_fallback
from .pipeline.graph_builds import GraphBuilds, caller_outputs
from .pipeline.product_upgrade import start_upgrade
from .pipeline.traced_backward import check_traced_backward
from .pipeline.update_graphs import compiles_in_background
from .pipeline.warm_start import start_warm
from .runtime.compile_workers import worker_count
from .runtime.module_batch import alone, gathered, gathering
from .runtime.stats import add_pending
from .settings import Settings, check_mode

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
    A backward compiled in the background starts building at its first
    call, not beside a forward's compile (pipeline/deferred.py).
    """
    name = f"{kind}_{next(_graph_ids)}"
    if computes_nothing(gm):
        # Views of its inputs only, such as the ``return loss.detach()`` Dynamo
        # resumes a training step with after ``optimizer.step()``: AOTAutograd
        # replays views of inputs on the caller's tensors, so PyTorch runs it
        # for free, where MAX would cost a build and a 20 s compile.
        _graphs_log.debug("torch-max-backend: graph %s computes nothing: PyTorch", name)
        return make_boxed_func(gm.forward)
    # The FX passes' rewrites, before the fingerprint: a warm start plans
    # the graph that was built (lower/passes/).
    gm = rewritten(gm)
    mark_frozen(gm, kind, settings.frozen_weights)
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
    builds = GraphBuilds(gm, layouts, settings.summed_products)
    fingerprint = graph_fingerprint(gm, layouts, settings.summed_products)
    # Whoever reads the MAX graphs (verbose) gets them built, not skipped.
    if fingerprint is not None and not _graphs_log.isEnabledFor(logging.DEBUG):
        warm = start_warm(gm, builds, fingerprint, settings)
        if warm is not None:
            compiled = compiled_graph(
                warm.plan,
                warm.constants,
                settings,
                name,
                (warm.model, warm.token, True, warm.seconds),
            )
            start_upgrade(
                builds,
                gm,
                compiled,
                warm.plan,
                warm.largest_upgradable_sum,
                fingerprint,
                settings,
            )
            return compiled
    if compiles_in_background(gm, kind, settings):
        return compile_in_background(
            name,
            gm,
            # The copy is a graph of its own: builds of its own.
            lambda copied: _start_compile(
                copied,
                settings,
                name,
                fingerprint,
                GraphBuilds(copied, layouts, settings.summed_products),
            ),
            strict=settings.strict,
            verbose=settings.verbose,
            after=backward_turn if kind == "backward" else None,
        )
    add_pending(1)
    if gathering() and kind != "inference":
        # max_backend gathers a step's forward and backward into one MAX
        # module, compiled once both are handed over: wait at the first call.
        # Pending until the module is compiled, called or not.
        forward_done = forward_compiling() if kind == "forward" else lambda: None

        def settle_step() -> None:
            add_pending(-1)
            forward_done()

        settled = once(settle_step)
        try:
            with gathered():
                return FirstCallWaits(
                    _start_compile(gm, settings, name, fingerprint, builds, settled)
                )
        except BaseException:
            settled()
            raise
    try:
        with alone():  # no backward follows: nothing to gather it with
            return _compile(gm, settings, name, fingerprint, builds)
    finally:
        add_pending(-1)


def _compile(
    gm: torch.fx.GraphModule,
    settings: Settings,
    name: str,
    fingerprint: str | None,
    builds: GraphBuilds,
) -> Callable[[list], list]:
    """``gm`` on MAX: whole, split around ops that run in PyTorch (its blocks
    compiled together, runtime/module_batch.py), or (when MAX cannot take it
    and not ``strict``) in PyTorch."""
    with gathered():
        finish = _start_compile(gm, settings, name, fingerprint, builds)
    return finish()


def _start_compile(
    gm: torch.fx.GraphModule,
    settings: Settings,
    name: str,
    fingerprint: str | None,
    builds: GraphBuilds,
    when_ready: Callable[[], None] = lambda: None,
) -> Finish:
    """Build ``gm`` and start compiling it; the returned function waits for
    the compile and gives the callable (``_compile`` in two halves, so that
    several graphs' compiles can be started, and gathered, before any wait).
    A whole graph compiled is recorded under ``fingerprint`` (pipeline/warm_start.py).
    ``builds`` builds ``gm`` and its blocks; ``when_ready`` is called once
    every compile started here is over."""
    placement = Placement(settings)
    try:
        whole = settle(gm, placement, builds.build)
    except MaxCompilerError as e:
        if settings.strict:
            raise
        refused = e
        when_ready()
        return lambda: in_pytorch(gm, name, refused)
    if whole is None:
        blocks: list[Future] = []

        def start_block(block: torch.fx.GraphModule, block_name: str) -> Future:
            blocks.append(start_max(block, builds, settings, block_name))
            return blocks[-1]

        finish_split = start_split(gm, placement, name, start_block)
        when_all_done(blocks, when_ready)

        def finish_blocks() -> Callable[[list], list]:
            split, report = finish_split()
            warn_fallback(report, settings)
            return make_boxed_func(split.forward)

        return finish_blocks
    ready = start_max(gm, builds, settings, name, fingerprint)
    when_all_done([ready], when_ready)

    def finish_whole() -> Callable[[list], list]:
        try:
            return wait_for(ready, gm, settings, name)
        except MaxCompilerError as e:
            if settings.strict:
                raise
            return in_pytorch(gm, name, e)

    return finish_whole


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
    # Nothing the backward does not read is saved for it (lower/passes/joint_saves.py).
    without_unread_saves(joint)
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
    check_traced_backward(gm, example_inputs)
    register_families()
    settings = Settings.resolve(options, mode)
    set_product_strategy(settings.product_strategy)
    set_conv_strategy(settings.conv_strategy)
    settle_timing(settings)
    compiler = functools.partial(compile_aten_graph, settings=settings)
    backend = aot_autograd(
        fw_compiler=functools.partial(compiler, kind="forward"),
        bw_compiler=functools.partial(compiler, kind="backward"),
        inference_compiler=functools.partial(compiler, kind="inference"),
        decompositions=decomposition_table(),
        partition_fn=functools.partial(_checked_partition, strict=settings.strict),
        keep_inference_input_mutations=True,
    )
    # Without background_compile="backward" (the default), the backward's
    # compile starts with the forward's, instead of at the first backward:
    # both compile together (runtime/module_batch.py), in the background
    # while the step runs in PyTorch, or else before the first call returns.
    everything = settings.background_compile is True
    together = compiled_together() if everything else gathered()
    with (
        torch._functorch.config.patch(force_non_lazy_backward_lowering=True),
        together,
    ):
        return backend(gm, example_inputs)
