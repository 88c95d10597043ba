"""The decode benchmark's tables: decode speed per model and batch size
(ratios, the memory-bandwidth bound and its share, tokens compared) and the
time to the first decoded token."""

from __future__ import annotations

from typing import Any

# max_backend's runs: (key, what the table calls it). PyTorch's OpenMP threads
# spin after each of generate()'s eager ops, on the cores MAX's kernels need
# next: passive, they sleep at once; with one torch thread there are none.
MAX_RUNS = (
    ("max", "max"),
    ("max_passive", "passive max"),
    ("max_one_thread", "1-thread max"),
)
# The runs that are advice on the CPU's OpenMP threads: not run on a GPU.
CPU_ONLY_RUNS = ("max_passive", "max_one_thread")


def _speed(figures: dict[str, Any] | None) -> str:
    """Tokens/s, marked when some graph ran in PyTorch instead of MAX."""
    if not figures:
        return "failed"
    speed = f"{figures['tokens_per_s']:.1f}"
    return f"{speed} (ran in PyTorch)" if figures.get("fallbacks") else speed


def _rows(
    results: dict[str, Any], gbps: float | None, device: str = "cpu"
) -> list[list[str]]:
    """Decode speed per model and batch size: tokens/s, ratios, the bound
    ("-" without a bandwidth: on a GPU). On a GPU the CPU thread runs are
    "-", not run; on the CPU a missing run failed."""
    rows = []
    for name, by_backend in results.items():
        eager = by_backend["eager"]
        for batch in eager:
            base = eager[batch]["tokens_per_s"]
            ind = by_backend["inductor"].get(batch)
            runs = [by_backend.get(key, {}).get(batch) for key, _ in MAX_RUNS]
            line = [name, batch, _speed(eager[batch]), _speed(ind)]
            line += [
                "-" if device == "cuda" and key in CPU_ONLY_RUNS else _speed(figures)
                for (key, _), figures in zip(MAX_RUNS, runs, strict=True)
            ]
            for figures in runs:
                speed = figures["tokens_per_s"] if figures else None
                line.append(f"{speed / base:.2f}x" if speed else "-")
                line.append(
                    f"{speed / ind['tokens_per_s']:.2f}x" if speed and ind else "-"
                )
            best = max(
                (f for f in runs if f), key=lambda f: f["tokens_per_s"], default=None
            )
            if best and gbps is not None:
                bound = int(batch) * gbps * 1e9 / best["bytes_per_step"]
                line.append(f"{bound:.0f} ({best['tokens_per_s'] / bound:.0%})")
            else:
                line.append("-")
            same = all(f["tokens"] == eager[batch]["tokens"] for f in runs if f)
            line.append("yes" if same and runs[0] else "NO")
            rows.append(line)
    return rows


HEADERS = [
    "model",
    "batch",
    "eager tok/s",
    "Inductor tok/s",
    "max tok/s",
    "max tok/s, OMP passive",
    "max tok/s, 1 torch thread",
    *(f"{label}/{other}" for _, label in MAX_RUNS for other in ("eager", "Inductor")),
    "bound tok/s (best max's share)",
    "same tokens",
]

# (column, where its figure is): the first decoded token at the first batch size.
FIRST_TOKEN = [
    ("eager", "eager"),
    ("Inductor, empty caches", "inductor"),
    ("Inductor, warm", "inductor_warm"),
    ("max, empty caches", "max"),
    ("max, warm", "max_warm"),
    ("max, empty caches, background compile", "max_background"),
]


def first_token_headers(caches: str) -> list[str]:
    """FIRST_TOKEN's columns; with ``--caches user`` the first processes
    found the user's caches as earlier runs left them, not empty ones."""
    columns = [column for column, _ in FIRST_TOKEN]
    if caches == "user":
        columns = [c.replace("empty caches", "user's caches") for c in columns]
    return ["model", *columns]


def _first_token_rows(results: dict[str, Any], batch: str) -> list[list[str]]:
    rows = []
    for name, by_run in results.items():
        line = [name]
        for _, key in FIRST_TOKEN:
            figures = by_run.get(key, {})
            figures = figures.get(batch, figures)  # full runs: per batch size
            seconds = figures.get("first_token_s")
            line.append("-" if seconds is None else f"{seconds:.1f}")
        rows.append(line)
    return rows
