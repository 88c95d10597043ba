"""One InferenceSession per device, and compiled models cached by graph text.

MAX keys its disk cache on the graph; we also keep an in-process table so that
a structure seen before in this process costs nothing to "compile" again.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from dataclasses import dataclass

import torch
from max.engine import InferenceSession, Model
from max.graph import Graph

from . import stats
from .devices import max_device


@dataclass
class CompileRecord:
    key: str
    seconds: float
    cached: bool


_LOCK = threading.Lock()
_MODELS: dict[tuple[str, str], Model] = {}
COMPILE_LOG: list[CompileRecord] = []


@functools.cache
def session_for(device: torch.device) -> InferenceSession:
    return InferenceSession(devices=[max_device(device)])


def graph_key(graph: Graph) -> str:
    return hashlib.sha256(str(graph).encode()).hexdigest()[:16]


def compile_graph(graph: Graph, device: torch.device) -> tuple[Model, CompileRecord]:
    """The loaded MAX model of ``graph``, compiled at most once per process."""
    key = graph_key(graph)
    cache_key = (key, str(device))
    start = time.perf_counter()
    with _LOCK:  # MAX serializes compiles anyway; this also guards the table
        model = _MODELS.get(cache_key)
        cached = model is not None
        if model is None:
            model = session_for(device).load(graph)
            _MODELS[cache_key] = model
    record = CompileRecord(key, time.perf_counter() - start, cached)
    COMPILE_LOG.append(record)
    if cached:
        stats.record(cache_hits=1)
    else:
        stats.record(max_compiles=1, compile_seconds=record.seconds)
    return model, record
