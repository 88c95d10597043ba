"""Mojo kernel libraries: built once into a cached ``.mojoc``, loaded per graph.

A library is a directory of Mojo sources (a Mojo package: it has an
``__init__.mojo``) whose kernels register themselves with
``@extensibility.register("name")``, or a single ``.mojo`` file, which is
wrapped into such a package. ``mojo precompile`` builds it into a ``.mojoc``
under ``<MAX cache root>/torch_max_backend/<max version>/kernels/<hash>/``,
the hash covering every source file and the compiler's version, so an edited
kernel is rebuilt and an unchanged one never is. Builds go to a staging
directory and are renamed into place: a failed or concurrent build never
leaves a half-written library.

A graph gets a library only when one of its ops calls a kernel from it
(``custom``): MAX analyses every library a graph carries, so graphs without
custom kernels carry none.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from max.graph import (
    BufferValue,
    DeviceRef,
    Graph,
    KernelLibrary,
    TensorType,
    TensorValue,
    ops,
)

from ..errors import MaxCompilerError
from ..storage.cache_dir import kernel_build_dir, max_version

Parameter = bool | int | float | str


class KernelBuildError(MaxCompilerError):
    """A Mojo kernel library did not compile; carries the compiler's message."""

    def __init__(self, library: str, source: Path, message: str) -> None:
        self.library, self.source, self.compiler_message = library, source, message
        super().__init__(
            f"building the Mojo kernel library {library!r} from {source} failed:\n"
            f"{message.strip()}"
        )


@functools.cache
def _compiler_version() -> str:
    # Cached: the installed compiler does not change within a process, and
    # reading package metadata costs about a millisecond per kernel call.
    for dist in ("mojo-compiler", "mojo", "max-core"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return f"max {max_version()}"


def _run_mojo(args: list[str]) -> tuple[int, str]:
    """Run the Mojo compiler that ships with MAX; (exit code, its messages)."""
    try:
        from mojo.run import subprocess_run_mojo
    except ImportError:  # pragma: no cover - a MAX install without the wheel
        exe = shutil.which("mojo")
        if exe is None:
            raise MaxCompilerError(
                "the Mojo compiler is not installed (it comes with `pip install max`)"
            ) from None
        import subprocess

        done = subprocess.run([exe, *args], capture_output=True, text=True)
    else:
        done = subprocess_run_mojo(args, capture_output=True, text=True)
    return done.returncode, (done.stderr or "") + (done.stdout or "")


def _source_files(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise FileNotFoundError(f"Mojo kernel source {source} does not exist")
    files = sorted(source.rglob("*.mojo"))
    if not files:
        raise FileNotFoundError(f"{source} holds no .mojo files")
    return files


def sources_digest(source: Path) -> str:
    """Hash of a kernel source's files (names below it and contents), not of
    where it lies: the same kernels in another checkout hash the same."""
    h = hashlib.sha256()
    root = source if source.is_dir() else source.parent
    for f in _source_files(source):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass
class MojoLibrary:
    """A Mojo kernel library: ``source`` is a package directory or one file."""

    name: str
    source: Path
    _built: Path | None = field(default=None, init=False, repr=False)
    # ``threading.Lock`` is a factory, not a type a checker can test against.
    _lock: Any = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.source = Path(self.source).resolve()
        if not self.name.isidentifier():
            raise ValueError(
                f"a kernel library name must be an identifier: {self.name!r}"
            )

    def digest(self) -> str:
        """Hash of the sources and the compiler: the build's cache key."""
        h = hashlib.sha256(f"{_compiler_version()}\n{self.name}\n".encode())
        # Not sources_digest: this key names every build in users' caches, so
        # it stays as it was (the name already tells checkouts apart).
        for f in _source_files(self.source):
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        return h.hexdigest()[:24]

    def path(self) -> Path:
        """The built ``.mojoc``, compiling the sources on first use."""
        with self._lock:
            digest = self.digest()
            if self._built is not None and self._built.parent.name == digest:
                return self._built
            out = kernel_build_dir(digest) / f"{self.name}.mojoc"
            if not out.is_file():
                self._build(out)
            self._built = out
            return out

    def _build(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
            package = self.source
            if self.source.is_file():
                # One file: a package around it; its messages name the file.
                package = Path(tmp) / "src" / self.name
                package.mkdir(parents=True)
                (package / "__init__.mojo").write_text("")
                (package / self.source.name).symlink_to(self.source)
            elif not (package / "__init__.mojo").is_file():
                raise KernelBuildError(
                    self.name, self.source, "a Mojo package needs an __init__.mojo"
                )
            # Same file name in staging: the name is part of the built package.
            staged = Path(tmp) / out.name
            code, message = _run_mojo(["precompile", str(package), "-o", str(staged)])
            if code != 0 or not staged.is_file():
                if self.source.is_file():
                    message = message.replace(
                        str(package / self.source.name), str(self.source)
                    )
                raise KernelBuildError(self.name, self.source, message)
            os.replace(staged, out)


def custom(
    library: MojoLibrary,
    kernel: str,
    values: Sequence[TensorValue],
    out_types: Sequence[TensorType],
    device: DeviceRef,
    parameters: Mapping[str, Parameter] | None = None,
) -> list[TensorValue]:
    """Call ``kernel`` of ``library`` in the graph being built, loading the
    library into that graph first if no earlier op did."""
    _import(library)
    results = ops.custom(
        kernel, device, list(values), list(out_types), parameters=parameters or None
    )
    return [r.tensor for r in results]


def custom_in_place(
    library: MojoLibrary,
    kernel: str,
    values: Sequence[TensorValue | BufferValue],
    device: DeviceRef,
    parameters: Mapping[str, Parameter] | None = None,
    out_types: Sequence[TensorType] = (),
) -> list[TensorValue]:
    """Call ``kernel`` of ``library``, which writes into its buffer operands
    (and returns ``out_types``' tensors, if any), in the graph being built
    (in the order of the graph's other buffer operations)."""
    _import(library)
    results = ops.inplace_custom(
        kernel,
        device,
        list(values),
        out_types=list(out_types) or None,
        parameters=parameters or None,
    )
    return [r.tensor for r in results]


def _import(library: MojoLibrary) -> None:
    """Load ``library`` into the graph being built, unless an earlier op did."""
    graph = Graph.current
    path = library.path()
    loaded = graph.kernel_libraries_paths
    if path not in loaded:
        if loaded:
            # MAX (26.7) keeps the analysis of a graph's libraries once a
            # custom op is checked against it, keyed by those libraries, and
            # hands that same object to later graphs with the same set: a
            # library added to it in place would be carried by every later
            # graph (a decode step's write_slot, then its attention, put the
            # attention kernels in every graph after). This graph gets an
            # analysis of its own.
            graph._kernel_library = KernelLibrary(loaded)
        # MAX records a graph's libraries in the graph itself (and so in its
        # text, our cache key) when they are imported.
        graph._import_kernels([path])


# The kernels torch-max-backend's own lowerings use.
SHIPPED = MojoLibrary("torch_max_backend_kernels", Path(__file__).parent / "mojo")
# The register-tiled product kernel: a library of its own, so that only graphs
# with such a product carry it, and editing it rebuilds no other graph.
TILED = MojoLibrary("torch_max_backend_tiled", Path(__file__).parent / "mojo_tiled")
# bfloat16 products on the CPU's bfloat16 pair dot products: likewise a
# library of its own.
PAIRED = MojoLibrary("torch_max_backend_paired", Path(__file__).parent / "mojo_paired")
# The register-tiled convolution kernel: likewise a library of its own.
CONV = MojoLibrary("torch_max_backend_conv", Path(__file__).parent / "mojo_conv")
# The few-rows product kernel that prefetches the weight it reads next:
# likewise a library of its own.
STREAMED = MojoLibrary(
    "torch_max_backend_streamed", Path(__file__).parent / "mojo_streamed"
)
# A decode step's attention (one query row a head) in one pass over the
# key/value cache: likewise a library of its own.
ATTENTION = MojoLibrary(
    "torch_max_backend_attention", Path(__file__).parent / "mojo_attention"
)
# The optimizer updates and Adam's step count: likewise a library of its own.
OPTIMIZER = MojoLibrary(
    "torch_max_backend_optimizer", Path(__file__).parent / "mojo_optimizer"
)
# float32 rounded to bfloat16 on the CPU: likewise a library of its own.
ROUNDING = MojoLibrary(
    "torch_max_backend_rounding", Path(__file__).parent / "mojo_rounding"
)
# One input times two or three weights in one kernel (a decode step's q, k
# and v; gate and up): likewise a library of its own.
GROUPED = MojoLibrary(
    "torch_max_backend_grouped", Path(__file__).parent / "mojo_grouped"
)
# 2-d max pooling with indices and its backward on the CPU: likewise a library
# of its own.
POOLING = MojoLibrary(
    "torch_max_backend_pooling", Path(__file__).parent / "mojo_pooling"
)
# The windows of a channels-last image, a row each output pixel (convolutions
# of channels-last filters): likewise a library of its own.
WINDOWS = MojoLibrary(
    "torch_max_backend_windows", Path(__file__).parent / "mojo_windows"
)
# Depthwise convolutions and their input gradient over channels-last images
# on the CPU: likewise a library of its own.
DEPTHWISE = MojoLibrary(
    "torch_max_backend_depthwise", Path(__file__).parent / "mojo_depthwise"
)
