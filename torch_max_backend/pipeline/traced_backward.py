"""A backward traced into the graph skips the hooks of what it differentiates.

With ``torch._dynamo.config.trace_autograd_ops = True`` Dynamo traces
``loss.backward()`` (and ``torch.autograd.grad``) into the forward's graph:
one MAX graph for both, and no autograd engine between them. The gradients
then come from tracing, not from the autograd engine, so the hooks a leaf
holds (``register_hook``, ``register_post_accumulate_grad_hook``) never run,
in PyTorch's own backends as in this one, and the step silently computes
other gradients than eager's. This backend refuses such a graph instead,
naming each hooked tensor. Hooks on autograd nodes (``AccumulateGrad``'s,
through which ``DistributedDataParallel`` all-reduces the gradients) are not
visible from Python, so such a graph is refused too while a process group
is initialized.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import TracedBackwardHooksError

# Both refusals start so: what the user turned on, by its name.
_TRACED = (
    "this graph's backward was traced into it "
    "(torch._dynamo.config.trace_autograd_ops=True)"
)


def _differentiated(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes ``torch.autograd.grad`` at ``node`` takes gradients for."""
    inputs = node.kwargs.get("inputs", node.args[1] if len(node.args) > 1 else ())
    if isinstance(inputs, torch.fx.Node):
        return [inputs]
    return [item for item in inputs if isinstance(item, torch.fx.Node)]


def _hooks_of(value: object) -> list[str]:
    if not isinstance(value, torch.Tensor):
        return []
    kinds = []
    if getattr(value, "_backward_hooks", None):
        kinds.append("register_hook")
    if getattr(value, "_post_accumulate_grad_hooks", None):
        kinds.append("register_post_accumulate_grad_hook")
    return kinds


def _process_group_initialized() -> bool:
    distributed = torch.distributed
    return distributed.is_available() and distributed.is_initialized()


def _source_name(node: torch.fx.Node) -> str:
    graph_arg = node.meta.get("grapharg")
    source = getattr(graph_arg, "source", None)
    return getattr(source, "name", None) or node.name


def check_traced_backward(
    gm: torch.fx.GraphModule, example_inputs: Sequence[object]
) -> None:
    """Raise ``TracedBackwardHooksError`` if ``gm`` differentiates a graph
    input that holds gradient hooks, or differentiates anything while a
    process group is initialized. A graph without a traced backward (every
    graph, unless the flag is on) passes at the cost of one node lookup."""
    grads = gm.graph.find_nodes(op="call_function", target=torch.autograd.grad)
    if not grads:
        return
    if _process_group_initialized():
        raise TracedBackwardHooksError(
            f"{_TRACED} while a process "
            "group is initialized: a traced backward skips the hooks on "
            "autograd nodes, through which DistributedDataParallel and FSDP "
            "all-reduce gradients, and these cannot be checked. Set "
            "torch._dynamo.config.trace_autograd_ops = False."
        )
    placeholders = {
        node: index for index, node in enumerate(gm.graph.find_nodes(op="placeholder"))
    }
    hooked: dict[str, list[str]] = {}
    for node in grads:
        for leaf in _differentiated(node):
            index = placeholders.get(leaf)
            if index is None or index >= len(example_inputs):
                continue
            kinds = _hooks_of(example_inputs[index])
            if kinds:
                hooked[_source_name(leaf)] = kinds
    if not hooked:
        return
    listed = "\n".join(
        f"  {name}: {', '.join(kinds)}" for name, kinds in hooked.items()
    )
    raise TracedBackwardHooksError(
        f"{_TRACED}, which computes "
        "gradients without running the gradient hooks of these tensors; "
        "the step would differ from eager's:\n"
        f"{listed}\n"
        "Set torch._dynamo.config.trace_autograd_ops = False for this model "
        "(its backward then runs as a graph of its own, hooks included), or "
        "remove the hooks."
    )
