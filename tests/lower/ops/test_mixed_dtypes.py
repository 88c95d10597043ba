"""A randomly drawn set of ops in one graph, over mixed dtypes and broadcasting.

The draw is seeded (``TORCH_MAX_BACKEND_FUZZ_SEED``, default 0) so that the
default run reuses one cached MAX graph; any other seed draws a new mix.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import torch

from .helpers import check_against_eager

Binary = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# Ops valid for any pair of real dtypes (bool included), with type promotion.
ANY: dict[str, Binary] = {
    "add": torch.add,
    "mul": torch.mul,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "eq": torch.eq,
    "lt": torch.lt,
    "ge": torch.ge,
    "where": lambda a, b: torch.where(a > 1, a, b),
    "true_div": lambda a, b: a / (b.abs() + 1),
    "scalar_mix": lambda a, b: a * 2.5 + b * 3,
    "sum_broadcast": lambda a, b: (a + b).sum(dim=-1, keepdim=True),
    "masked_fill": lambda a, b: a.masked_fill(b > 0, 7),
    "cat_cast": lambda a, b: torch.cat([a.float().flatten(), b.float().flatten()]),
}
# Ops needing numbers, not bools.
NUMERIC: dict[str, Binary] = {
    "sub": torch.sub,
    "floor_div": lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="floor"),
    "remainder": lambda a, b: torch.remainder(a, b.abs() + 1),
    "fmod": lambda a, b: torch.fmod(a, b.abs() + 1),
    "pow_int": lambda a, b: a**2 + b,
    "clamp": lambda a, b: torch.clamp(a, min=-1, max=3) * b,
    "abs_neg": lambda a, b: a.abs() - b.neg(),
    "max_dim": lambda a, b: (a + b).max(dim=0).values,
    "argmin": lambda a, b: (a - b).argmin(dim=-1),
    "prod": lambda a, b: (a + b).prod(dim=0),
    "flip_add": lambda a, b: a.flip(-1) + b,
    "cumsum": lambda a, b: (a * b).cumsum(dim=-1),
}
# Ops of floating point math (integers promote to float32).
FLOAT: dict[str, Binary] = {
    "atan2": torch.atan2,
    "exp_mix": lambda a, b: torch.exp(a.float().clamp(max=3)) + b,
    "log2": lambda a, b: torch.log2(a.abs().float() + 1) * b,
    "tanh_sigmoid": lambda a, b: torch.tanh(a.float()) * torch.sigmoid(b.float()),
    "softmax": lambda a, b: torch.softmax((a + b).float(), dim=-1),
    "sinh_cosh": lambda a, b: torch.sinh(a.float() / 4) - torch.cosh(b.float() / 4),
    "var": lambda a, b: (a.float() + b).var(dim=-1),
}


def _inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {
        "f32": torch.randn(4, 1, 5, generator=g),
        "f16": torch.randn(1, 3, 5, generator=g).half(),
        "bf16": torch.randn(3, 1, generator=g).bfloat16(),
        "i64": torch.randint(-5, 6, (4, 3, 1), generator=g),
        "i32": torch.randint(-5, 6, (5,), generator=g, dtype=torch.int32),
        "bool": torch.rand(3, 5, generator=g) > 0.5,
    }


def test_random_ops_mixed_dtypes_in_one_graph(max_calls):
    seed = int(os.environ.get("TORCH_MAX_BACKEND_FUZZ_SEED", "0"))
    rng = random.Random(seed)
    inputs = _inputs()
    names = list(inputs)
    plan = []
    for table, count in ((ANY, 6), (NUMERIC, 6), (FLOAT, 4)):
        for op_name in rng.sample(sorted(table), count):
            left, right = rng.choice(names), rng.choice(names)
            if table is not ANY:
                # bool has no arithmetic negation or subtraction in torch.
                left = "i64" if left == "bool" else left
                right = "i32" if right == "bool" else right
            plan.append((table[op_name], names.index(left), names.index(right)))

    def fn(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(op(tensors[i], tensors[j]) for op, i, j in plan)

    # float16/bfloat16 results carry their dtype's rounding.
    check_against_eager(fn, *inputs.values(), rtol=1e-2, atol=1e-2)
    assert max_calls.count == 1, f"seed {seed}: {plan}"
