"""Artifact bundles: compiled graphs carried to another process or machine.

``save_artifacts(path)`` writes the MAX artifacts this process compiled or
loaded (storage/artifacts.py), with the Mojo kernel builds, into one file;
``load_artifacts(path)`` puts them where a fresh process finds them, so that
it compiles nothing. ``torch-max-backend cache pack FILE`` / ``cache unpack
FILE`` do the same for the whole cache of the installed MAX.

A bundle is a gzip'd tar: ``manifest.json`` (the MAX, torch and
torch-max-backend versions, each device's target, every file's size and
SHA-256) and the files under ``files/``. Compiled code is only valid for the
MAX version, device and CPU target it was compiled for, so a bundle from
another one is refused with a message naming the difference. A damaged or
truncated bundle is refused the same way. Nothing reaches the cache before
every file has been read and checked, files already there are kept, and
each file is moved in whole (a rename), so the user's cache is never
damaged.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import platform
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path, PurePosixPath

from .. import logs
from .artifacts import used_artifacts
from .cache_dir import max_version, own_cache_dir
from .known_graphs import RECORD_SUFFIX, RECORDS

FORMAT = "torch-max-backend artifact bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
KERNELS = "kernels"


class BundleError(Exception):
    """A bundle that cannot be used here; the message says why."""


class BundleWarning(UserWarning):
    """An artifact bundle was not loaded; graphs compile as usual."""


@dataclass(frozen=True)
class Bundle:
    """What a bundle holds (``save_artifacts`` returns it)."""

    path: Path
    artifacts: int
    kernel_files: int
    bytes: int


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def cpu_target() -> str:
    """The CPU that MAX compiles for here: its virtual target when one is
    set, else the machine, the CPU model and a digest of its feature flags
    (MAX generates code for the host's features)."""
    from max import driver

    virtual = driver.get_virtual_cpu_target()
    if virtual:
        return virtual
    model, flags = host_cpu()
    if model is None:
        model = platform.processor()
    digest = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:12]
    return f"{platform.machine()} {model or 'unknown CPU'} (features {digest})"


@functools.cache
def host_cpu() -> tuple[str | None, tuple[str, ...]]:
    """This machine's CPU model name ("" where not named) and feature flags,
    sorted, from Linux's /proc/cpuinfo (its first processor); None and no
    flags where that cannot be read."""
    model, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = value
    except OSError:
        return None, ()
    return model, tuple(sorted(flags.split()))


def device_target(name: str) -> str:
    """The target of a device directory (``cpu``, ``cuda-0``) on this machine."""
    if name == "cpu":
        return cpu_target()
    kind, _, index = name.partition("-")
    from max import driver

    try:
        return driver.Accelerator(int(index or 0)).architecture_name
    except Exception as e:  # no such accelerator here
        return f"absent ({kind} {index}: {type(e).__name__})"


def _identity() -> dict[str, str]:
    return {
        "max": max_version(),
        "torch": _package_version("torch"),
        "torch_max_backend": _package_version("torch-max-backend"),
    }


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _in_bundle(path: Path, root: Path) -> bool:
    """Artifacts and the records of the graphs they hold (known_graphs.py)
    under a device directory, and kernel builds; not files in the making
    (hidden names) nor anything else."""
    parts = path.relative_to(root).parts
    return (
        len(parts) >= 2
        and path.is_file()
        and not any(part.startswith(".") for part in parts)
        and (
            parts[0] == KERNELS
            or path.suffix == ".mef"
            or (parts[1] == RECORDS and path.suffix == RECORD_SUFFIX)
        )
    )


def _bundle_files(everything: bool) -> list[Path]:
    root = own_cache_dir()
    if everything:
        return sorted(p for p in root.rglob("*") if _in_bundle(p, root))
    files = [
        p for p in used_artifacts() if p.is_relative_to(root) and _in_bundle(p, root)
    ]
    if not files:
        raise BundleError(
            "this process compiled or loaded no MAX graph yet: nothing to save "
            "(`torch-max-backend cache pack FILE` packs the whole cache)"
        )
    # Kernel builds are small; a graph that calls a kernel needs its build.
    kernels = root / KERNELS
    if kernels.is_dir():
        files += sorted(p for p in kernels.rglob("*") if _in_bundle(p, root))
    return files


def save_artifacts(path: str | os.PathLike, *, everything: bool = False) -> Bundle:
    """Write the MAX artifacts this process compiled or loaded, and the Mojo
    kernel builds, to the bundle ``path`` (every artifact of the installed
    MAX's cache with ``everything``)."""
    root = own_cache_dir()
    files = _bundle_files(everything)
    devices = sorted({p.relative_to(root).parts[0] for p in files} - {KERNELS})
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **_identity(),
        "targets": {name: device_target(name) for name in devices},
        "files": {
            p.relative_to(root).as_posix(): {
                "bytes": p.stat().st_size,
                "sha256": _digest(p),
            }
            for p in files
        },
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".partial")
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
            data = json.dumps(manifest, indent=1).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            for p in files:
                tar.add(p, arcname=f"files/{p.relative_to(root).as_posix()}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    kernel_files = sum(
        1 for name in manifest["files"] if name.startswith(f"{KERNELS}/")
    )
    return Bundle(
        target,
        sum(1 for name in manifest["files"] if name.endswith(".mef")),
        kernel_files,
        target.stat().st_size,
    )


def _check_manifest(manifest: object) -> dict:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError("it is not a torch-max-backend artifact bundle")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise BundleError(
            f"its format version {manifest.get('format_version')!r} is not "
            f"{FORMAT_VERSION}, the one this torch-max-backend reads"
        )
    here = _identity()
    for key in ("max", "torch"):
        if manifest.get(key) != here[key]:
            raise BundleError(
                f"it was compiled with {key} {manifest.get(key)}, this process "
                f"runs {key} {here[key]}"
            )
    targets = manifest.get("targets")
    if not isinstance(targets, dict) or not isinstance(manifest.get("files"), dict):
        raise BundleError("its manifest lists no targets or files")
    for name, target in targets.items():
        local = device_target(name)
        if target != local:
            raise BundleError(
                f"it was compiled for {name} target {target!r}; this machine's "
                f"is {local!r}"
            )
    return manifest


def _safe_name(name: str) -> str:
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or ".." in parts:
        raise BundleError(f"it holds a file outside the cache: {name!r}")
    return name


def _read_checked(bundle: Path, staging: Path) -> dict:
    """Extract ``bundle`` into ``staging``, every file checked; the manifest."""
    try:
        with tarfile.open(bundle, "r:gz") as tar:
            member = tar.extractfile(MANIFEST)
            if member is None:
                raise BundleError("it has no manifest")
            try:
                manifest = _check_manifest(json.loads(member.read()))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise BundleError(f"its manifest is unreadable ({e})") from e
            expected = {_safe_name(k): v for k, v in manifest["files"].items()}
            seen = set()
            for info in tar:
                if info.name == MANIFEST:
                    continue
                name = info.name.removeprefix("files/")
                if name not in expected or not info.isfile():
                    raise BundleError(
                        f"it holds a file its manifest omits: {info.name!r}"
                    )
                out = staging / name
                out.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(info)
                assert source is not None
                with out.open("wb") as f:
                    shutil.copyfileobj(source, f)
                want = expected[name]
                if out.stat().st_size != want.get("bytes") or _digest(out) != want.get(
                    "sha256"
                ):
                    raise BundleError(
                        f"its file {name} is corrupted (checksum differs)"
                    )
                seen.add(name)
            missing = sorted(set(expected) - seen)
            if missing:
                raise BundleError(f"it lacks {len(missing)} file(s), e.g. {missing[0]}")
            return manifest
    except BundleError:
        raise
    except FileNotFoundError as e:
        raise BundleError("there is no such file") from e
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        # gzip and tar report truncation and garbage as these.
        raise BundleError(
            f"it is damaged or truncated ({type(e).__name__}: {e})"
        ) from e


def load_artifacts(path: str | os.PathLike) -> int:
    """Install the bundle at ``path`` into this machine's cache; returns how
    many artifacts were new. A bundle that cannot be used (another MAX or
    torch version, device or CPU target; damaged, truncated) is refused with
    a ``BundleWarning`` naming the reason, and 0 returned: graphs then
    compile as usual."""
    try:
        return install(Path(path))
    except BundleError as e:
        logs.warn(
            f"torch-max-backend: the artifact bundle {path} was not loaded: {e}; "
            "graphs compile as usual",
            BundleWarning,
            logger="cache",
            stacklevel=2,
        )
        return 0


def install(bundle: Path) -> int:
    """``load_artifacts``, raising ``BundleError`` instead of warning."""
    root = own_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".unpacking-") as tmp:
        staging = Path(tmp)
        manifest = _read_checked(bundle, staging)
        installed = 0
        for name in manifest["files"]:
            final = root / name
            if final.is_file():
                continue  # the same key: the same compiled graph; keep it
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, final)
            installed += name.endswith(".mef")
    logs.get_logger("cache").info(
        "torch-max-backend: %d artifact(s) installed from %s", installed, bundle
    )
    return installed
