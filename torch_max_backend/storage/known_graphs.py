"""Records of graphs compiled before: an ATen graph's fingerprint -> its plan
and the artifact holding its compiled MAX graph.

A record lets a later process (or another machine, through a bundle) skip
building the MAX graph of an ATen graph it has seen (pipeline/warm_start.py). Records
are small JSON files beside the artifacts, written atomically; one that
cannot be read is removed and the graph built as usual.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .. import logs
from .artifacts import device_dir, note_used
from .cache_dir import own_cache_dir

# The directory of records under a device's artifacts.
RECORDS = "known"
RECORD_SUFFIX = ".json"
FORMAT_VERSION = 1

_log = logs.get_logger("cache")


def record_path(fingerprint: str, device: str) -> Path:
    """Where the record of the ATen graph ``fingerprint`` on ``device`` lives."""
    return own_cache_dir() / device_dir(device) / RECORDS / f"{fingerprint}.json"


def read_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path``; None when there is none or it is unreadable
    (then removed, so that the next compile writes a good one)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        _log.warning("torch-max-backend: cannot read %s: %s", path, e)
        return None
    try:
        record = json.loads(text)
        if not isinstance(record, dict) or record.get("version") != FORMAT_VERSION:
            raise ValueError("not a record of this format")
    except ValueError as e:
        _log.warning("torch-max-backend: removing the unreadable %s: %s", path, e)
        path.unlink(missing_ok=True)
        return None
    note_used(path)
    return record


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Save ``record`` at ``path`` atomically; a failure costs only the saving."""
    data = json.dumps({"version": FORMAT_VERSION, **record})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".partial")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        note_used(path)
    except OSError as e:
        _log.warning("torch-max-backend: could not save %s: %s", path, e)


def forget(path: Path) -> None:
    """Remove the record at ``path``: what it names is gone or does not fit."""
    _log.info("torch-max-backend: removing the stale record %s", path)
    path.unlink(missing_ok=True)
