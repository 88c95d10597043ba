# An Adam or AdamW update's step count and bias corrections, for our
# adam_step kernel. Lowered op by op they were about 13 scalar ops a
# parameter (two powers, reciprocals, a square root), each a graph op with
# lifted numbers of its own, and the count a graph output copied back into
# its tensor after the call: about 20 us a parameter at run time, AdamW
# 2.47 ms against SGD's 1.22 for 62 small parameters (docs/benchmarks.md,
# "What a training step compiles"). Here it is one kernel that counts in
# place and hands adam_step its coefficients.

import extensibility
from extensibility import InputTensor, OutputTensor
# MAX 26.7 exports the mutable-input spec under this private name only.
from extensibility.managed_tensor_slice import (
    _MutableInputTensor as MutableInputTensor,
)
from max.gpu.host import DeviceContext
from std.math import sqrt
from std.utils.index import IndexList


@extensibility.register("torch_max_backend_adam_count")
struct AdamCount:
    """`step += 1`, then adam_step's coefficients [decay, w1, beta2, w2, a,
    b] from `numbers` = [decay, w1, beta2, w2, beta1, beta2_bc, lr, eps] as
    torch's compiled single-tensor Adam computes them in float32
    (torch/optim/adam.py, capturable form):

        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2_bc ** step
        step_size = lr / bias_correction1      (`lr_divides`: a tensor lr)
                  = (1 / bias_correction1) * lr  (a number lr)
        a = sqrt(bias_correction2) * -step_size
        b = (1 / -step_size) * eps
    """

    @staticmethod
    def execute[
        rank: Int, //, lr_divides: Bool, target: StaticString
    ](
        coefficients: OutputTensor[dtype=DType.float32, rank=1, ...],
        step: MutableInputTensor[dtype=DType.float32, rank=rank, ...],
        numbers: InputTensor[dtype=DType.float32, rank=1, ...],
        ctx: DeviceContext,
    ) raises:
        comptime assert target == "cpu", "torch_max_backend_adam_count runs on CPU"
        var count = step.unsafe_ptr()
        var t = count[0] + 1
        count[0] = t
        for i in range(4):
            coefficients.store[1](IndexList[1](i), numbers.load[1](IndexList[1](i)))
        var beta1 = numbers.load[1](IndexList[1](4))
        var beta2 = numbers.load[1](IndexList[1](5))
        var lr = numbers.load[1](IndexList[1](6))
        var eps = numbers.load[1](IndexList[1](7))
        var correction1 = 1 - beta1**t
        var correction2 = 1 - beta2**t
        var step_size: Float32
        comptime if lr_divides:
            step_size = lr / correction1
        else:
            step_size = (1 / correction1) * lr
        var negative = -step_size
        coefficients.store[1](IndexList[1](4), sqrt(correction2) * negative)
        coefficients.store[1](IndexList[1](5), (1 / negative) * eps)
