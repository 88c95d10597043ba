"""Reading the backend's environment variables: flags, integers, lists.

The base of settings.py, apart from it so that the knobs' table is one file
and how a variable's text is read another. No torch: the AOT runner reads
its variables here too.
"""

from __future__ import annotations

import os

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def first_set(names: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, value) of the first set variable among ``names``."""
    for name in names:
        raw = os.environ.get(name)
        if raw is not None:
            return name, raw
    return None


def env_flag(*names: str) -> bool | None:
    """The value of the first set variable among ``names``, or None if none is set.

    Raises ValueError for a value that is neither true nor false, instead of
    guessing what the user meant.
    """
    found = first_set(names)
    if found is None:
        return None
    name, raw = found
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"environment variable {name}={raw!r} is not a boolean; "
        f"use one of {sorted(_TRUE)} or {sorted(_FALSE - {''})}"
    )


def env_int(*names: str) -> int | None:
    """The first set variable among ``names`` as an integer >= 1, or None."""
    found = first_set(names)
    if found is None:
        return None
    name, raw = found
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer >= 1")
    return value


def env_list(*names: str) -> list[str] | None:
    """The first set variable among ``names`` split at commas, or None."""
    found = first_set(names)
    if found is None:
        return None
    return [part for part in found[1].split(",") if part.strip()]
