"""The ``torch_max_backend`` logger hierarchy: every diagnostic goes through it.

Loggers: ``torch_max_backend.graphs`` (the ATen and MAX graphs, DEBUG),
``torch_max_backend.compile`` (compile times, INFO), ``torch_max_backend.profile``
(the per-graph table at exit, INFO), ``torch_max_backend.fallback`` and
``torch_max_backend.cache`` (what is also warned, WARNING). Users route or
silence them like any library's. ``verbose`` and ``profile`` keep printing
to stderr in a program that configured no logging: setting them attaches a
stderr handler to the ``torch_max_backend`` logger, unless a handler already
receives its records.
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

ROOT = "torch_max_backend"

_LOCK = threading.Lock()

# A library's loggers print nothing unless the program (or verbose/profile)
# asks: without this, Python's last-resort handler would print every logged
# warning a second time beside the warning itself.
logging.getLogger(ROOT).addHandler(logging.NullHandler())


def get_logger(name: str) -> logging.Logger:
    """The logger ``torch_max_backend.<name>``."""
    return logging.getLogger(f"{ROOT}.{name}")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at each record (test capture,
    notebooks and redirections replace it after the handler is made)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def show_on_stderr(name: str, level: int) -> None:
    """Make records of ``torch_max_backend.<name>`` at ``level`` reach stderr.

    Called when ``verbose`` or ``profile`` is set: the logger is opened to
    ``level``, and a stderr handler is attached to the package's logger when
    nothing would otherwise print its records.
    """
    logger = get_logger(name)
    with _LOCK:
        if logger.getEffectiveLevel() > level or logger.level == logging.NOTSET:
            logger.setLevel(level)
        root = logging.getLogger(ROOT)
        if not _printed(root):
            handler = _StderrHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            root.addHandler(handler)


def _printed(logger: logging.Logger | None) -> bool:
    """Whether a handler that writes somewhere receives ``logger``'s records."""
    while logger is not None:
        if any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
            return True
        logger = logger.parent if logger.propagate else None
    return False


_collecting = threading.local()


@contextmanager
def collect_warnings() -> Iterator[list[tuple[str, type[Warning]]]]:
    """Keep this thread's ``warn`` calls in a list instead of warning.

    A graph compiled in the background warns from a thread the user never
    sees; its warnings are kept and given again on the caller's thread, at
    the graph's next call (pipeline/background.py), where the user's filters apply.
    """
    kept: list[tuple[str, type[Warning]]] = []
    outer = getattr(_collecting, "kept", None)
    _collecting.kept = kept
    try:
        yield kept
    finally:
        _collecting.kept = outer


def warn(
    message: str,
    category: type[Warning],
    *,
    logger: str,
    stacklevel: int = 2,
) -> None:
    """A Python warning (users filter those) that is logged as well."""
    get_logger(logger).warning(message)
    kept = getattr(_collecting, "kept", None)
    if kept is not None:
        kept.append((message, category))
        return
    warnings.warn(message, category, stacklevel=stacklevel + 1)
