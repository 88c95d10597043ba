"""What a training step's joint graph hands its backward, before partitioning.

AOTAutograd's partitioner saves for the backward every forward value a
backward node names. Batch norm's backward in training names the running
statistics its forward updated, which it never reads (it normalizes with the
batch's saved mean and rstd; torch's kernels read the running ones only in
eval mode): ResNet-18's forward returned 40 such vectors at every step, each
an output MAX writes and our call paths carry. They are dropped from those
nodes, so that nothing saves them.
"""

from __future__ import annotations

import torch

_BATCH_NORM_BACKWARD = torch.ops.aten.native_batch_norm_backward.default
# native_batch_norm_backward(grad_out, input, weight, running_mean,
# running_var, save_mean, save_invstd, train, eps, output_mask)
_RUNNING = (3, 4)
_TRAIN = 7


def without_unread_saves(joint: torch.fx.GraphModule) -> int:
    """Drop from ``joint`` (in place) the backward's references to values it
    never reads; returns how many were dropped."""
    dropped = 0
    for node in joint.graph.nodes:
        if node.target is not _BATCH_NORM_BACKWARD or len(node.args) <= _TRAIN:
            continue
        if node.args[_TRAIN] is not True:
            continue
        args = list(node.args)
        for i in _RUNNING:
            if args[i] is not None:
                args[i] = None
                dropped += 1
        node.args = tuple(args)
    if dropped:
        joint.recompile()
    return dropped
