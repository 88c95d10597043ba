"""The compile stage: a built MAX graph compiled, loaded and made the callable
AOTAutograd calls (``CompiledGraph``), or the ATen graph left to PyTorch when
MAX refuses it.

A graph compiled whole is recorded for warm starts (warm_start.py), and one
whose small products were built as sums starts its upgrade to MAX's matmul
once running (product_upgrade.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future

import torch
from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .. import logs
from ..errors import MaxCompilerError, first_line
from ..kernels.product_timing import settle_timing_with
from ..kernels.weight_packing import pack_listed
from ..logs import show_on_stderr
from ..plan import GraphPlan, InputKind
from ..runtime import huge_pages, max_poller, max_workers, packed_weights, torch_threads
from ..runtime.compiled_graph import CompiledGraph
from ..runtime.profile import GraphStats, ProfiledCompiledGraph
from ..runtime.progress import compile_progress, wanted
from ..runtime.session import compile_graph_async
from ..settings import Settings
from .fallback import FallbackWarning
from .graph_builds import GraphBuilds
from .product_upgrade import start_upgrade
from .warm_start import remember

_graphs_log = logs.get_logger("graphs")
_compile_log = logs.get_logger("compile")


def in_pytorch(
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


def settle_timing(settings: Settings) -> None:
    """Product and convolution forms timed while a graph is built run as its
    calls will: with MAX's polling thread idled, where the graph's compile
    idles it (below)."""
    settle_timing_with(max_poller.idle_for_timing if settings.idle_max_poller else None)


def start_max(
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
            compiled = compiled_graph(
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
                    built.largest_upgradable_sum,
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


def wait_for(
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


def compiled_graph(
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
    if settings.idle_max_poller and plan.device.startswith("cpu"):
        max_poller.idle_poller()
    if settings.rest_max_workers and plan.device.startswith("cpu"):
        max_workers.enable()
    if any(source.kind is InputKind.PACKED for source in plan.inputs):
        packed_weights.use_packer(pack_listed)
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
