"""How long a compiled training step takes to run wholly on MAX, from empty caches.

    python -m benchmarks.time_to_max --models mlp-train,gpt2-train,resnet18-train
    python -m benchmarks.time_to_max --models mobilenetv2-train --background updates

For each ``-train`` case of the suite (benchmarks/cases.py) and each
setting of ``background_compile`` asked for (``--background``: off,
updates, backward (the default setting), on; ``both`` is off and on,
``all`` the four), one fresh process over empty compile caches calls the compiled step
until a step runs with none of its graphs in PyTorch, and reports:

- the first step's seconds (off: it waits for every MAX compile; updates:
  for all but the optimizer's, whose first calls run in PyTorch; backward:
  for the forward's alone, the backward and the optimizer's step running
  in PyTorch until theirs are loaded; on: it runs in PyTorch while MAX
  compiles);
- the seconds from the first call until a step ran wholly on MAX, and how
  many steps ran before it (each of those ran some graph in PyTorch);
- the median of five steps after that.

Product upgrades (summed products moved to MAX's matmul later, at low
priority) do not count: a graph running its summed products is on MAX.
This machine's product timings are carried into the empty caches
(benchmarks/machine.py), as the suite's cold runs carry them.

``mobilenetv2-train`` (a small MobileNetV2, 2x3x64x64, AdamW; issue 59's
case, whose first step waits 8-11 minutes on 2 cores) runs only when
named.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmarks import cases
from benchmarks.child import child_json_or_exit
from benchmarks.machine import cpu_line, machine, product_timings_carried

CASES = ("mlp-train", "gpt2-train", "resnet18-train")
# Run when named, not by default.
NAMED_ONLY = ("mobilenetv2-train",)
# background_compile's settings by the names --background and the table use.
SETTINGS: dict[str, bool | str] = {
    "off": False,
    "updates": "updates",
    "backward": "backward",
    "on": True,
}
_BACKGROUND = {
    "off": ("off",),
    "updates": ("updates",),
    "backward": ("backward",),
    "on": ("on",),
    "both": ("off", "on"),
    "all": ("off", "updates", "backward", "on"),
}
# Steps a process may take to reach MAX, and the time it may take.
_MAX_STEPS = 10_000
_TIMEOUT_S = 3600.0


def until_on_max(
    step: Callable[[], object], eager_calls: Callable[[], int]
) -> dict[str, float]:
    """Call ``step`` until one call adds no graph run in PyTorch (counted by
    ``eager_calls``); the first call's seconds, the seconds until that call
    ended, and the calls before it."""
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    steps, on_max = 1, first
    wholly = eager_calls() == 0
    while not wholly:
        if steps >= _MAX_STEPS or time.perf_counter() - start > _TIMEOUT_S:
            raise SystemExit(f"not on MAX after {steps} steps")
        before = eager_calls()
        step()
        steps += 1
        on_max = time.perf_counter() - start
        wholly = eager_calls() == before
    return {"first_step_s": first, "on_max_s": on_max, "steps_before": steps - 1}


def _child(case: str, background: str) -> None:
    """One case in this (fresh) process; prints its figures as JSON."""
    import torch

    from torch_max_backend import compile_stats

    torch.manual_seed(0)
    model, x, y, stepper = cases._training_case(case)
    model.train()
    options = {"background_compile": SETTINGS[background]}
    step = torch.compile(stepper(model, x, y), backend="max", options=options)
    figures: dict[str, Any] = {"case": case, "background": background}
    figures.update(until_on_max(step, lambda: compile_stats().eager_calls))
    after = []
    for _ in range(5):
        begin = time.perf_counter()
        step()
        after.append(time.perf_counter() - begin)
    figures["median_ms_after"] = statistics.median(after) * 1e3
    print(json.dumps(figures), flush=True)


def _measure(case: str, background: str) -> dict[str, Any]:
    # This machine's product timings are a fact of the machine, kept as the
    # suite's cold runs keep them: the timing graphs' compiles (about 100 s)
    # are not the step's.
    with (
        tempfile.TemporaryDirectory(prefix="bench-") as tmp,
        product_timings_carried(Path(tmp)),
    ):
        env = dict(os.environ)
        env["MODULAR_DERIVED_PATH"] = tmp
        args = ["-m", "benchmarks.time_to_max", "--child", case, background]
        return child_json_or_exit(
            args, f"{case} (background {background})", env=env, timeout=_TIMEOUT_S
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--background", choices=tuple(_BACKGROUND), default="all")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=2, metavar=("CASE", "BACKGROUND"))
    args = parser.parse_args(argv)
    if args.child:
        if args.child[1] not in SETTINGS:
            parser.error(f"--child: no background setting {args.child[1]!r}")
        _child(args.child[0], args.child[1])
        return
    names = [m for m in args.models.split(",") if m]
    known = CASES + NAMED_ONLY
    for name in names:
        if name not in known:
            parser.error(f"unknown case {name!r}; choose from {', '.join(known)}")
    print(cpu_line(machine()), file=sys.stderr)
    settings = _BACKGROUND[args.background]
    rows = [_measure(n, bg) for n in names for bg in settings]
    print(
        tabulate(
            [
                [
                    r["case"],
                    r["background"],
                    f"{r['first_step_s']:.1f}",
                    f"{r['on_max_s']:.1f}",
                    r["steps_before"],
                    f"{r['median_ms_after']:.1f}",
                ]
                for r in rows
            ],
            headers=[
                "case",
                "background",
                "first step s",
                "wholly on MAX after s",
                "steps before",
                "then median ms",
            ],
        )
    )
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}))


if __name__ == "__main__":
    main()
