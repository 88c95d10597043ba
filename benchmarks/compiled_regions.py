"""What regional compilation gives a user of this backend.

    python -m benchmarks.compiled_regions [--layers 12] [--width 256]

A stack of transformer-style layers (LayerNorm, multi-head attention, a 4x
MLP), once plain and once with each layer's forward marked
``torch.compiler.nested_compile_region``: the seconds Dynamo and AOTAutograd
take to trace it, the seconds our build of the MAX graph takes, and the MAX
ops each builds. Nothing is compiled by MAX: the marked layers are inlined
into one MAX graph (lower/builder/higher_order.py), so MAX's compile, which
follows the graph's ops, is the same for both. Both forms run in one
process, in both orders, after a warm-up trace.
"""

from __future__ import annotations

import argparse
import collections
import re
import time

import torch


class _Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(width)
        self.attn = torch.nn.MultiheadAttention(width, 4, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width),
            torch.nn.GELU(),
            torch.nn.Linear(4 * width, width),
        )

    def body(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        attended, _ = self.attn(h, h, h, need_weights=False)
        x = x + attended
        return x + self.mlp(self.ln2(x))


class _Plain(_Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class _Marked(_Block):
    @torch.compiler.nested_compile_region
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def measure(block: type[_Block], layers: int, width: int) -> dict[str, object]:
    """Trace and build seconds, FX nodes and MAX op counts of one stack."""
    from torch._dynamo.backends.common import aot_autograd

    from torch_max_backend.lower.builder import build_graph
    from torch_max_backend.lower.registry import decomposition_table

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[block(width) for _ in range(layers)]).eval()
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, _: object) -> torch.fx.GraphModule:
        graphs.append(gm)
        return gm

    backend = aot_autograd(fw_compiler=keep, decompositions=decomposition_table())
    torch._dynamo.reset()
    start = time.perf_counter()
    with torch.no_grad():
        torch.compile(model, backend=backend)(torch.randn(1, 32, width))
    traced = time.perf_counter() - start
    start = time.perf_counter()
    built = build_graph(graphs[0])
    build = time.perf_counter() - start
    ops = collections.Counter(re.findall(r"= (r?mo\.\w+)", str(built.graph)))
    return {
        "trace_s": traced,
        "build_s": build,
        "fx_nodes": len(graphs[0].graph.nodes),
        "max_ops": ops,
    }


def main() -> None:
    from torch_max_backend.lower.families import register_families

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    register_families()
    measure(_Plain, 1, args.width)  # warm-up: Dynamo, the registry
    results: dict[str, list[dict[str, object]]] = {"plain": [], "marked": []}
    for order in ((_Plain, _Marked), (_Marked, _Plain)):
        for block in order:
            name = "plain" if block is _Plain else "marked"
            results[name].append(measure(block, args.layers, args.width))
    print(f"{args.layers} layers, {args.width} wide, batch 1 x 32 tokens")
    for name, runs in results.items():
        traces = ", ".join(f"{r['trace_s']:.2f}" for r in runs)
        builds = ", ".join(f"{r['build_s']:.2f}" for r in runs)
        print(
            f"{name:7s} trace {traces} s, build {builds} s, "
            f"{runs[0]['fx_nodes']} FX nodes, {sum(runs[0]['max_ops'].values())} MAX ops"
        )
    same = results["plain"][0]["max_ops"] == results["marked"][0]["max_ops"]
    print(f"the same MAX ops: {'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
