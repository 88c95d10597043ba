"""One typed place for every knob of the backend.

Precedence, lowest first: dataclass defaults, ``torch.compile(options={...})``,
then environment variables, so that a flag set in a shell always wins over code.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_flag(*names: str) -> bool | None:
    """The value of the first set variable among ``names``, or None if none is set.

    Raises ValueError for a value that is neither true nor false, instead of
    guessing what the user meant.
    """
    for name in names:
        raw = os.environ.get(name)
        if raw is None:
            continue
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ValueError(
            f"environment variable {name}={raw!r} is not a boolean; "
            f"use one of {sorted(_TRUE)} or {sorted(_FALSE - {''})}"
        )
    return None


@dataclass(frozen=True)
class Settings:
    """Options of one ``torch.compile`` call.

    Attributes:
        verbose: print the ATen graphs received and the MAX graphs built.
        profile: collect compile and run times per graph and print them at exit.
    """

    verbose: bool = False
    profile: bool = False

    # Environment variables for each field; the older PYTORCH_ spelling is kept.
    _ENV: ClassVar[dict[str, tuple[str, ...]]] = {
        "verbose": ("TORCH_MAX_BACKEND_VERBOSE", "PYTORCH_MAX_BACKEND_VERBOSE"),
        "profile": ("TORCH_MAX_BACKEND_PROFILE", "PYTORCH_MAX_BACKEND_PROFILE"),
    }

    @classmethod
    def resolve(cls, options: object = None) -> Settings:
        """Settings from ``options`` with environment overrides applied."""
        # ``options`` comes from the user: typed ``object`` and checked here.
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(
                "torch.compile(options=...) for torch-max-backend must be a dict, "
                f"got {type(options).__name__}"
            )
        known = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, bool] = {}
        for key, value in (options or {}).items():
            if key not in known:
                raise ValueError(
                    f"unknown torch-max-backend option {key!r}; "
                    f"known options: {sorted(known)}"
                )
            if not isinstance(value, bool):
                raise TypeError(
                    f"torch-max-backend option {key!r} must be a bool, "
                    f"got {type(value).__name__} {value!r}"
                )
            values[key] = value
        for key, names in cls._ENV.items():
            flag = env_flag(*names)
            if flag is not None:
                values[key] = flag
        return cls(**values)


def beartype_enabled() -> bool:
    """Runtime type checks of the package's own functions, on unless switched off."""
    flag = env_flag("TORCH_MAX_BACKEND_BEARTYPE", "PYTORCH_MAX_BACKEND_BEARTYPE")
    return True if flag is None else flag
