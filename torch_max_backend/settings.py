"""One typed place for every knob of the backend.

Precedence, lowest first: dataclass defaults, ``torch.compile(options={...})``,
then environment variables, so that a flag set in a shell always wins over code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from .env_vars import env_flag, env_int, env_list, first_set

# torch.compile's modes, and what each means on MAX. MAX picks its kernels
# itself and a compiled graph's call is already one execute (no Python per
# op, nothing to capture), so every mode compiles the same graphs.
MODES = {
    "default": "compile every graph on MAX",
    "reduce-overhead": "as default: a call of a MAX graph is already one execute",
    "max-autotune": "every product on MAX's matmul kernel (summed_products off)",
    "max-autotune-no-cudagraphs": "as max-autotune",
}
# Modes that trade compile time for the fastest calls.
AUTOTUNE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
# background_compile: graphs that only update their inputs (an optimizer's
# step) compile in the background, the others before their call.
BACKGROUND_UPDATES = "updates"
# background_compile's default: the updates, and a training step's backward,
# built from its first call, after the forwards (pipeline/update_graphs.py).
BACKGROUND_BACKWARD = "backward"
# background_compile's values besides True and False.
BACKGROUND_CHOICES = (BACKGROUND_UPDATES, BACKGROUND_BACKWARD)
# How a float32 product on the CPU is built (lower/product_choice.py): timed
# per machine and shape, the fixed rules, or one strategy wherever it fits.
PRODUCT_STRATEGIES = (
    "auto",
    "rule",
    "row_sums",
    "skinny",
    "matmul",
    "vendor",
    "tiled",
    "streamed",
    "vendor_packed",
    "paired",
)
# How a convolution is built (lower/conv_choice.py): our tiled kernel or MAX's
# conv2d timed per machine and shape, the fixed rules, or one strategy
# wherever it fits.
CONV_STRATEGIES = ("auto", "rule", "im2col_matmul", "depthwise", "tiled", "direct")


def check_mode(mode: str | None) -> None:
    """Raise ValueError, naming the known modes, for a mode not in ``MODES``."""
    if mode is not None and mode not in MODES:
        raise ValueError(
            f"torch-max-backend does not know mode {mode!r}; "
            f"known modes: {', '.join(MODES)}"
        )


@dataclass(frozen=True)
class Settings:
    """Options of one ``torch.compile`` call.

    Attributes:
        verbose: print the ATen graphs received and the MAX graphs built.
        profile: collect compile and run times per graph and print them at exit.
        strict: raise ``UnsupportedOpsError`` listing every op MAX cannot run,
            instead of running those ops in PyTorch.
        min_block_size: the fewest ATen ops a block of supported ops must have
            to become a MAX graph when a graph is split around ops that run in
            PyTorch; smaller blocks run in PyTorch too. A MAX graph costs a
            compile (seconds) and about 40 us per call, more than a few eager
            ops cost.
        torch_executed_ops: ops to run in PyTorch even though MAX can, by
            name (``"aten.cumsum"``, ``"aten.cumsum.default"``) or as
            ``torch.ops.aten.cumsum`` objects.
        max_cached_graphs: how many compiled MAX graphs the process keeps
            loaded for reuse beyond those a live compiled function still
            runs (least recently used go first), and how many entries the
            compile log and the profile table keep. Process-wide: the
            latest compile's value applies.
        background_compile: run a graph in PyTorch (the ATen graph
            AOTAutograd produced) while its MAX graph is built and compiled
            off the caller's thread, and switch its calls to MAX once the
            compiled graph is loaded (pipeline/background.py). ``True``:
            every graph. ``"backward"`` (the default): a training step's
            backward, built from its first call, after its forwards, so
            that the step's first call waits for the forward's compile
            alone, and the graphs ``"updates"`` names. ``"updates"``: only
            graphs that return nothing and update their inputs in place,
            such as ``optimizer.step()``, so that a training step's first
            call does not wait for its optimizer's compile after the
            backward's (pipeline/update_graphs.py). ``False``: none. See
            docs/usage.md, "Compile time".
        compile_workers: how many worker processes compile MAX graphs at
            once; 1 compiles in the calling process. None chooses from the
            usable cores and memory (runtime/compile_workers.py).
            Process-wide: the first compile fixes it.
        summed_products: on the CPU, build each product of at most
            2^21 multiply-adds (static sizes) as a broadcast product summed
            over K, in graphs whose every product is that small: MAX's
            matmul kernel costs about 50 s of compile a graph, a summed
            product runs within tens of microseconds of it
            (lower/products.py). False, or mode "max-autotune": MAX's
            matmul for every product.
        upgrade_products: once a graph with summed products runs, compile
            its matmul version in a compile worker process and switch the
            graph's calls to it when loaded; later processes start on it
            (pipeline/product_upgrade.py). Only where compiles run in worker
            processes (``compile_workers`` above 1).
        huge_pages: on Linux 6.1 or later, ask the kernel to move each CPU
            weight of 2 MiB or more that a MAX graph reads onto 2 MiB pages
            (``MADV_COLLAPSE``, in place, in the background): a decode step
            streams every weight, and 4 KiB pages cost it a fifth or more
            (runtime/huge_pages.py). Process-wide: the latest compile's
            value applies.
        product_strategy: how each float32 (or half-precision) product on the
            CPU is built: ``"auto"`` times the strategies that fit its shape
            once per machine (MAX's matmul, our few-rows kernel, row sums,
            the vendor BLAS) and keeps the fastest in the storage cache;
            ``"rule"`` takes fixed rules without timing; a strategy's name
            (``"matmul"``, ``"skinny"``, ``"streamed"``, ``"row_sums"``,
            ``"vendor"``, ``"tiled"``, ``"vendor_packed"``, ``"paired"``:
            bfloat16 on the CPU's bfloat16 pair dot products, AVX512-BF16)
            builds every product it fits that way
            (lower/product_choice.py). Process-wide: the latest compile's
            value applies.
        frozen_weights: promise, as Inductor's ``freezing`` does, that the
            weights an inference graph reads (graph inputs: parameters,
            buffers) do not change behind torch's back, so that on the CPU
            a product (float32, bfloat16, float16) may read its weight
            packed once by the vendor BLAS
            (strategy ``"vendor_packed"``, timed against the others;
            kernels/weight_packing.py). A weight is packed again when the
            tensor is another one, moves, or changes by a torch op (its
            version counter): a write through ``.data`` or through numpy
            bumps no version and is not seen. Each packed weight is a
            copy, kept while the graph lives.
        conv_strategy: how each 2-d (and 1-d) convolution is built:
            ``"auto"`` times our register-tiled kernel against MAX's conv2d
            once per machine and shape where both fit (float32 on the CPU,
            outputs over 16x16 pixels) and keeps the faster in the storage
            cache; ``"rule"`` takes fixed rules without timing; a
            strategy's name (``"im2col_matmul"``, ``"tiled"``, ``"direct"``)
            builds every convolution it fits that way
            (lower/conv_choice.py). Process-wide: the latest compile's
            value applies.
        quiet_torch_threads: when a CPU graph is first compiled, make
            PyTorch's OpenMP threads (GNU OpenMP) sleep soon after each
            parallel region instead of spinning for milliseconds on the
            cores MAX's kernels need next (runtime/torch_threads.py), as
            ``OMP_WAIT_POLICY=PASSIVE`` would; left alone where the user
            set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``. Process-wide
            and once: it cannot be undone in a process.
        idle_max_poller: when a CPU graph is first compiled, or its
            product forms first timed, look for MAX's runtime polling thread
            (it wakes every 100 us and preempts MAX's own kernels) and let
            it run only on idle cores (Linux ``SCHED_IDLE``;
            runtime/max_poller.py); forms are timed once it is found.
            Process-wide and once.
        rest_max_workers: when a CPU graph is first compiled, let MAX's
            worker threads rest at nice 19 after each execute of 5 ms or
            more and take their priority back before the next
            (they keep spinning long after long executes, on the cores the
            caller's Python needs; runtime/max_workers.py). Only where the
            process may raise a thread's priority back. Process-wide.
    """

    verbose: bool = False
    profile: bool = False
    strict: bool = False
    min_block_size: int = 5
    torch_executed_ops: frozenset[str] = frozenset()
    max_cached_graphs: int = 256
    background_compile: bool | str = BACKGROUND_BACKWARD
    compile_workers: int | None = None
    summed_products: bool = True
    upgrade_products: bool = True
    huge_pages: bool = True
    product_strategy: str = "auto"
    conv_strategy: str = "auto"
    frozen_weights: bool = False
    quiet_torch_threads: bool = True
    idle_max_poller: bool = True
    rest_max_workers: bool = True

    # Environment variables for each field; the older PYTORCH_ spelling is kept.
    _ENV: ClassVar[dict[str, tuple[str, ...]]] = {
        "verbose": ("TORCH_MAX_BACKEND_VERBOSE", "PYTORCH_MAX_BACKEND_VERBOSE"),
        "profile": ("TORCH_MAX_BACKEND_PROFILE", "PYTORCH_MAX_BACKEND_PROFILE"),
        "strict": ("TORCH_MAX_BACKEND_STRICT",),
        "min_block_size": ("TORCH_MAX_BACKEND_MIN_BLOCK_SIZE",),
        "torch_executed_ops": ("TORCH_MAX_BACKEND_TORCH_EXECUTED_OPS",),
        "max_cached_graphs": ("TORCH_MAX_BACKEND_MAX_CACHED_GRAPHS",),
        "background_compile": ("TORCH_MAX_BACKEND_BACKGROUND_COMPILE",),
        "compile_workers": ("TORCH_MAX_BACKEND_COMPILE_WORKERS",),
        "summed_products": ("TORCH_MAX_BACKEND_SUMMED_PRODUCTS",),
        "upgrade_products": ("TORCH_MAX_BACKEND_UPGRADE_PRODUCTS",),
        "huge_pages": ("TORCH_MAX_BACKEND_HUGE_PAGES",),
        "product_strategy": ("TORCH_MAX_BACKEND_PRODUCT_STRATEGY",),
        "conv_strategy": ("TORCH_MAX_BACKEND_CONV_STRATEGY",),
        "frozen_weights": ("TORCH_MAX_BACKEND_FROZEN_WEIGHTS",),
        "quiet_torch_threads": ("TORCH_MAX_BACKEND_QUIET_TORCH_THREADS",),
        "idle_max_poller": ("TORCH_MAX_BACKEND_IDLE_MAX_POLLER",),
        "rest_max_workers": ("TORCH_MAX_BACKEND_REST_MAX_WORKERS",),
    }

    @classmethod
    def env_flag_of(cls, key: str) -> bool | None:
        """An on/off setting as its environment variable sets it, None when
        unset: for code that has no compile options (the AOT runner)."""
        return env_flag(*cls._ENV[key])

    @classmethod
    def resolve(cls, options: object = None, mode: str | None = None) -> Settings:
        """Settings from ``mode``, then ``options``, then the environment."""
        # ``options`` comes from the user: typed ``object`` and checked here.
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(
                "torch.compile(options=...) for torch-max-backend must be a dict, "
                f"got {type(options).__name__}"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, object] = {}
        if mode in AUTOTUNE_MODES:
            values["summed_products"] = False
        for key, value in (options or {}).items():
            if key not in known:
                raise ValueError(
                    f"unknown torch-max-backend option {key!r}; "
                    f"known options: {sorted(known)}"
                )
            values[key] = _option(key, value)
        for key, names in cls._ENV.items():
            if key in _INT_OPTIONS:
                number = env_int(*names)
                if number is not None:
                    values[key] = number
            elif key == "torch_executed_ops":
                listed = env_list(*names)
                if listed is not None:
                    values[key] = frozenset(op_name(n) for n in listed)
            elif key in _STRATEGY_OPTIONS:
                found = first_set(names)
                if found is not None:
                    values[key] = _strategy(key, found[1].strip(), found[0])
            elif key == "background_compile":
                found = first_set(names)
                if found is not None:
                    values[key] = _background_setting(names, found[1])
            else:
                flag = env_flag(*names)
                if flag is not None:
                    values[key] = flag
        return cls(**values)  # type: ignore[arg-type]


def op_name(op: object) -> str:
    """``aten.cumsum.default`` for an overload, ``aten.cumsum`` for a packet
    (meaning all its overloads); strings are taken as written."""
    import torch  # here, not at the top: the AOT runner imports this module

    if isinstance(op, str):
        name = op.strip()
        if not name:
            raise ValueError("an empty op name in torch_executed_ops")
        return name if "." in name else f"aten.{name}"
    if isinstance(op, torch._ops.OpOverload):
        return str(op)
    if isinstance(op, torch._ops.OpOverloadPacket):
        return str(op).removeprefix("torch.ops.")
    raise TypeError(
        "torch_executed_ops takes op names or torch.ops objects, "
        f"got {type(op).__name__} {op!r}"
    )


_INT_OPTIONS = ("min_block_size", "max_cached_graphs", "compile_workers")


def _option(key: str, value: object) -> object:
    if key == "compile_workers" and value is None:
        return None  # chosen from the machine
    if key in _INT_OPTIONS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TypeError(
                f"torch-max-backend option {key!r} must be an int >= 1, "
                f"got {type(value).__name__} {value!r}"
            )
        return value
    if key in _STRATEGY_OPTIONS:
        return _strategy(key, value, f"option {key!r}")
    if key == "background_compile" and value in BACKGROUND_CHOICES:
        return value
    if key == "torch_executed_ops":
        if isinstance(value, str) or not isinstance(value, Iterable):
            raise TypeError(
                "torch-max-backend option 'torch_executed_ops' must be a list of "
                f"ops, got {type(value).__name__} {value!r}"
            )
        return frozenset(op_name(op) for op in value)
    if not isinstance(value, bool):
        kinds = (
            f"a bool, {' or '.join(repr(c) for c in BACKGROUND_CHOICES)}"
            if key == "background_compile"
            else "a bool"
        )
        raise TypeError(
            f"torch-max-backend option {key!r} must be {kinds}, "
            f"got {type(value).__name__} {value!r}"
        )
    return value


# The options that name a strategy: what each is called in errors, its names.
_STRATEGY_OPTIONS = {
    "product_strategy": ("product", PRODUCT_STRATEGIES),
    "conv_strategy": ("convolution", CONV_STRATEGIES),
}


def _strategy(key: str, value: object, where: str) -> str:
    what, known = _STRATEGY_OPTIONS[key]
    if not isinstance(value, str) or value not in known:
        raise ValueError(
            f"torch-max-backend {where}={value!r} is not a {what} strategy; "
            f"use one of {', '.join(known)}"
        )
    return value


def _background_setting(names: tuple[str, ...], raw: str) -> bool | str:
    """background_compile from its environment variable: a flag, "updates"
    or "backward"."""
    if raw.strip().lower() in BACKGROUND_CHOICES:
        return raw.strip().lower()
    try:
        flag = env_flag(*names)
    except ValueError as e:
        choices = " or ".join(repr(choice) for choice in BACKGROUND_CHOICES)
        raise ValueError(f"{e}, {choices}") from None
    assert flag is not None
    return flag


def beartype_enabled() -> bool:
    """Runtime type checks of the package's own functions, on unless switched off."""
    flag = env_flag("TORCH_MAX_BACKEND_BEARTYPE", "PYTORCH_MAX_BACKEND_BEARTYPE")
    return True if flag is None else flag
