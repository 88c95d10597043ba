"""Which graphs compile in the background: ``background_compile``'s choice.

An optimizer's ``step()`` reaches the backend as a graph of its own, traced
only once the backward has run, so its compile (15-25 s on 2 cores for a
small model's AdamW) cannot overlap the forward's and backward's and would
add to a training step's first call. Such a graph returns nothing: it only
updates its inputs in place (parameters, moments, step counts). Run in
PyTorch until its MAX graph is loaded, its calls give what eager's give,
nobody waits for it, and no output of the caller's changes shape or kind
when it switches. With ``background_compile="updates"`` these graphs alone
compile in the background; the others (whose outputs a benchmark times,
whose random draws a seed fixes) compile before their first call returns.

With the default ``background_compile="backward"`` a training step's
backward graph runs in PyTorch too until its MAX graph is loaded, and its
build starts at its first call, once the step's forwards have compiled and
run (deferred.py's ``backward_turn``): the step's first call waits for the
forward's compile alone, with the cores to itself, instead of for the
forward's and the backward's. Its first backward runs AOTAutograd's backward graph in PyTorch
over what the MAX forward saved (with eager's layout where an op reads
strides, background.py), so its gradients are eager's; nothing the caller
reads changes kind when it switches: autograd hands the gradients on.

Kept waiting even so: under ``strict`` (a refused graph must raise at its
first call), with ``torch.use_deterministic_algorithms(True)`` (a step that
ran in PyTorch rounds its last bits as PyTorch does, so two runs could
differ by where the switch fell), and for graphs that draw random numbers.
"""

from __future__ import annotations

import torch

from ..lower.passes import writes_input
from ..settings import BACKGROUND_BACKWARD, BACKGROUND_UPDATES, Settings


def updates_inputs_only(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` returns nothing and copies into at least one input."""
    writes = False
    for node in gm.graph.nodes:
        if node.op == "output":
            outputs = node.args[0] if node.args else ()
            if not isinstance(outputs, (tuple, list)):
                outputs = (outputs,)
            if any(out is not None for out in outputs):
                return False
        elif node.op == "call_function":
            writes = writes or writes_input(node, node.args[0] if node.args else None)
    return writes and not _draws_random_numbers(gm)


def _draws_random_numbers(gm: torch.fx.GraphModule) -> bool:
    return any(
        torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
        for node in gm.graph.nodes
        if node.op == "call_function"
    )


def compiles_in_background(
    gm: torch.fx.GraphModule, kind: str, settings: Settings
) -> bool:
    """Whether ``gm`` runs in PyTorch until its MAX graph is loaded."""
    if settings.background_compile is True:
        return True
    if settings.background_compile not in (BACKGROUND_UPDATES, BACKGROUND_BACKWARD):
        return False
    if settings.strict or torch.are_deterministic_algorithms_enabled():
        return False
    if kind == "backward":
        return settings.background_compile == BACKGROUND_BACKWARD and not (
            _draws_random_numbers(gm)
        )
    return kind == "inference" and updates_inputs_only(gm)
