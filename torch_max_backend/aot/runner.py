"""Run an exported package: no torch, no lowering code, only MAX and numpy.

>>> model = load("mlp.maxpkg")
>>> outputs = model(np.ones((4, 16), np.float32))
>>> result = model.run(np.ones((4, 16), np.float32))   # outputs, latency, memory

Every weight is checked against the manifest (MAX itself checks only names),
and every input against the manifest's dtypes and shapes (a symbolic dim must
have one value across inputs), each failure with one clear PackageError.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime import max_poller
from ..settings import Settings
from ..storage.cache_dir import max_version
from .manifest import GRAPH, WEIGHTS, Manifest, PackageError, TensorSpec


@dataclass
class InferenceResult:
    outputs: list[np.ndarray]
    latency_ms: float
    # Bytes of the weights, inputs and outputs held for this call, and the
    # process's peak resident memory.
    memory_bytes: int
    peak_rss_bytes: int
    output_shapes: list[tuple[int, ...]]


def _check(spec: TensorSpec, dtype: str, shape: tuple[int, ...], dims: dict) -> None:
    if dtype != spec.dtype:
        raise PackageError(f"{spec.name} must be {spec.dtype}, got {dtype}")
    if len(shape) != len(spec.shape):
        raise PackageError(
            f"{spec.name} must have rank {len(spec.shape)} "
            f"({spec.describe()}), got shape {list(shape)}"
        )
    for axis, (want, got) in enumerate(zip(spec.shape, shape, strict=True)):
        if isinstance(want, int):
            if want != got:
                raise PackageError(
                    f"{spec.name} dim {axis} must be {want} ({spec.describe()}), "
                    f"got shape {list(shape)}"
                )
        elif dims.setdefault(want, got) != got:
            raise PackageError(
                f"{spec.name} dim {axis} is {want}, which another input sets to "
                f"{dims[want]}; got {got}"
            )


def _to_buffer(array: np.ndarray, device: Any) -> Any:
    from max.driver import Buffer

    if array.ndim == 0:
        # MAX cannot wrap a 0-d bool array; a 1-element one viewed as 0-d works.
        one = Buffer.from_numpy(array.reshape(1))
        return one.view(one.dtype, ()).to(device)
    return Buffer.from_numpy(np.require(array, requirements="C")).to(device)


def _as_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)  # zero-copy for CPU tensors
        except (RuntimeError, TypeError, BufferError) as e:
            raise PackageError(f"{name}: cannot read it through DLPack: {e}") from None
    if isinstance(value, (list, tuple, int, float)):
        return np.asarray(value)
    raise PackageError(
        f"{name} must be a numpy array or a DLPack tensor, got {type(value).__name__}"
    )


class LoadedModel:
    """A package loaded on a MAX device, callable on numpy or DLPack inputs."""

    def __init__(self, path: str | Path, device: str = "cpu") -> None:
        from max.driver import CPU, Accelerator, accelerator_count
        from max.engine import InferenceSession
        from max.engine.api import read
        from safetensors.numpy import load_file

        self.path = Path(path)
        self.manifest = manifest = Manifest.read(self.path)
        installed = max_version()
        if manifest.max_version != installed:
            raise PackageError(
                f"{self.path} was compiled with MAX {manifest.max_version}; this "
                f"is MAX {installed}: export it again with this version"
            )
        kind, _, index = device.partition(":")
        if kind not in ("cpu", "gpu"):
            raise PackageError(f"unknown device {device!r}; use cpu, gpu or gpu:N")
        if kind != manifest.device:
            raise PackageError(
                f"{self.path} was compiled for {manifest.device}, not {kind}: "
                f"export it with --device {kind}"
            )
        if kind == "gpu":
            n = int(index or 0)
            if n >= accelerator_count():
                raise PackageError(f"no MAX accelerator {n} on this machine")
            self.device = Accelerator(n)
        else:
            self.device = CPU()
            # MAX's polling thread, which starts at the first run, would take
            # cores from the package's kernels (runtime/max_poller.py); the
            # variable that turns it off for compiled graphs holds here too.
            if Settings.env_flag_of("idle_max_poller") is not False:
                max_poller.idle_poller()
        try:
            arrays = load_file(str(self.path / WEIGHTS))
        except Exception as e:  # safetensors raises its own error types
            raise PackageError(f"{self.path / WEIGHTS} cannot be read: {e}") from None
        expected = {w.name: w for w in manifest.weights}
        if set(arrays) != set(expected):
            missing = sorted(set(expected) - set(arrays))
            extra = sorted(set(arrays) - set(expected))
            raise PackageError(
                f"{self.path / WEIGHTS} does not hold the manifest's weights "
                f"(missing {missing}, unexpected {extra})"
            )
        for name, spec in expected.items():
            _check(spec, str(arrays[name].dtype), arrays[name].shape, {})
        self.weight_bytes = sum(a.nbytes for a in arrays.values())
        self._weights = {name: _to_buffer(a, self.device) for name, a in arrays.items()}
        try:
            compiled = read(self.path / GRAPH)
            self._session = InferenceSession(devices=[self.device])
            self._model = self._session.init(compiled)
            # Outputs that are an input's or a weight's own memory (found at
            # the first run; see _outputs_sharing_memory), copied at every run.
            self._sharing: list[int] | None = None
        except Exception as e:
            raise PackageError(
                f"{self.path / GRAPH} cannot be loaded: {str(e).splitlines()[0]}"
            ) from None

    def _buffers(self, inputs: tuple[Any, ...]) -> tuple[list[Any], int]:
        specs = self.manifest.inputs
        if len(inputs) != len(specs):
            listed = ", ".join(s.describe() for s in specs)
            raise PackageError(
                f"expected {len(specs)} input(s) ({listed}), got {len(inputs)}"
            )
        arrays = [_as_array(x, s.name) for x, s in zip(inputs, specs, strict=True)]
        dims: dict[str, int] = {}
        for array, spec in zip(arrays, specs, strict=True):
            _check(spec, str(array.dtype), array.shape, dims)
        buffers = []
        for item in self.manifest.order:
            kind, _, key = item.partition(":")
            if kind == "input":
                buffers.append(_to_buffer(arrays[int(key)], self.device))
            else:
                buffers.append(self._weights[key])
        return buffers, sum(a.nbytes for a in arrays)

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        return self.run(*inputs).outputs

    def run(self, *inputs: Any) -> InferenceResult:
        """Outputs with the call's latency (device synchronized) and memory."""
        buffers, input_bytes = self._buffers(inputs)
        start = time.perf_counter()
        results = self._model.execute(*buffers)
        if hasattr(self.device, "synchronize"):
            self.device.synchronize()
        latency = (time.perf_counter() - start) * 1e3
        outputs = [r.to_numpy() for r in results]
        checks = self.manifest.checks
        if checks:
            flags = outputs.pop()
            if flags.any():
                error, message = checks[int(flags.argmax())]
                raise (IndexError if error == "IndexError" else RuntimeError)(message)
        if self._sharing is None:
            self._sharing = _outputs_sharing_memory(outputs, buffers)
        for i in self._sharing:
            outputs[i] = outputs[i].copy()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return InferenceResult(
            outputs=outputs,
            latency_ms=latency,
            memory_bytes=self.weight_bytes
            + input_bytes
            + sum(o.nbytes for o in outputs),
            peak_rss_bytes=rss,
            output_shapes=[o.shape for o in outputs],
        )


def _outputs_sharing_memory(outputs: list[np.ndarray], inputs: list[Any]) -> list[int]:
    """The outputs lying in an input's or a weight's memory, or in an earlier
    output's.

    MAX returns an input's own buffer for an output it has nothing to compute
    for (a weight the graph returns, a clone of an input), and one buffer for
    two outputs it computes alike; a caller writing into such an output would
    change the weight every later run reads, or the other output.
    """
    earlier = [b.to_numpy() for b in inputs if b.is_host]
    sharing = []
    for i, out in enumerate(outputs):
        if not out.size:
            continue
        if any(np.may_share_memory(out, a) for a in earlier):
            sharing.append(i)
        else:
            earlier.append(out)
    return sharing


def load(path: str | Path, device: str = "cpu") -> LoadedModel:
    """Load a package written by ``torch_max_backend.export``."""
    return LoadedModel(path, device)
