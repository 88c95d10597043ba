"""Settings, environment flags, devices and runtime type checks."""

from __future__ import annotations

import pytest

import torch_max_backend
from torch_max_backend import get_accelerators
from torch_max_backend.errors import InternalTypeError
from torch_max_backend.lower.shapes import normalize_dim
from torch_max_backend.settings import Settings


def test_defaults_options_and_env_precedence(monkeypatch):
    monkeypatch.delenv("TORCH_MAX_BACKEND_VERBOSE", raising=False)
    monkeypatch.delenv("PYTORCH_MAX_BACKEND_VERBOSE", raising=False)
    monkeypatch.delenv("TORCH_MAX_BACKEND_PROFILE", raising=False)
    monkeypatch.delenv("PYTORCH_MAX_BACKEND_PROFILE", raising=False)
    monkeypatch.delenv("TORCH_MAX_BACKEND_PRODUCT_STRATEGY", raising=False)
    monkeypatch.delenv("TORCH_MAX_BACKEND_CONV_STRATEGY", raising=False)
    monkeypatch.delenv("TORCH_MAX_BACKEND_UPGRADE_PRODUCTS", raising=False)
    assert Settings.resolve() == Settings(verbose=False, profile=False)
    assert Settings.resolve({"verbose": True}).verbose
    monkeypatch.setenv("TORCH_MAX_BACKEND_VERBOSE", "no")
    assert not Settings.resolve({"verbose": True}).verbose  # env wins
    monkeypatch.setenv("PYTORCH_MAX_BACKEND_PROFILE", "Yes")  # older spelling
    assert Settings.resolve().profile


def test_bad_flag_values_are_rejected(monkeypatch):
    monkeypatch.setenv("TORCH_MAX_BACKEND_PROFILE", "maybe")
    with pytest.raises(
        ValueError, match="TORCH_MAX_BACKEND_PROFILE='maybe' is not a boolean"
    ):
        Settings.resolve()
    monkeypatch.delenv("TORCH_MAX_BACKEND_PROFILE")
    with pytest.raises(TypeError, match="must be a bool"):
        Settings.resolve({"profile": "1"})


def test_get_accelerators_lists_cpu_first():
    devices = list(get_accelerators())
    assert devices[0].label == "cpu"
    device = "cuda" if len(devices) >= 2 else "cpu"
    assert device in ("cpu", "cuda")


def test_runtime_type_checks_flag_internal_bugs():
    if not torch_max_backend.settings.beartype_enabled():
        pytest.skip("TORCH_MAX_BACKEND_BEARTYPE=0")
    with pytest.raises(InternalTypeError, match="internal error in torch-max-backend"):
        normalize_dim("0", 2)


def test_background_and_worker_options(monkeypatch):
    for name in (
        "TORCH_MAX_BACKEND_BACKGROUND_COMPILE",
        "TORCH_MAX_BACKEND_COMPILE_WORKERS",
    ):
        monkeypatch.delenv(name, raising=False)
    defaults = Settings.resolve()
    # Training steps' backward graphs and graphs that update their inputs
    # (optimizer steps) by default.
    assert defaults.background_compile == "backward"
    assert defaults.compile_workers is None
    chosen = Settings.resolve({"background_compile": True, "compile_workers": 3})
    assert chosen.background_compile is True and chosen.compile_workers == 3
    assert Settings.resolve({"background_compile": False}).background_compile is False
    monkeypatch.setenv("TORCH_MAX_BACKEND_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("TORCH_MAX_BACKEND_COMPILE_WORKERS", "2")
    from_env = Settings.resolve({"compile_workers": 3})
    assert from_env.background_compile is True and from_env.compile_workers == 2
    monkeypatch.setenv("TORCH_MAX_BACKEND_BACKGROUND_COMPILE", " Updates ")
    assert (
        Settings.resolve({"background_compile": True}).background_compile == "updates"
    )
    monkeypatch.setenv("TORCH_MAX_BACKEND_BACKGROUND_COMPILE", "later")
    with pytest.raises(
        ValueError, match=r"COMPILE='later' is not a boolean.*'updates' or 'backward'"
    ):
        Settings.resolve()
    monkeypatch.delenv("TORCH_MAX_BACKEND_BACKGROUND_COMPILE")
    with pytest.raises(
        TypeError, match="must be a bool, 'updates' or 'backward', got str 'all'"
    ):
        Settings.resolve({"background_compile": "all"})
    with pytest.raises(TypeError, match="'compile_workers' must be an int >= 1"):
        Settings.resolve({"compile_workers": 0})
    monkeypatch.setenv("TORCH_MAX_BACKEND_COMPILE_WORKERS", "many")
    with pytest.raises(ValueError, match="COMPILE_WORKERS='many' is not an integer"):
        Settings.resolve()


def test_summed_products_from_mode_options_and_env(monkeypatch):
    monkeypatch.delenv("TORCH_MAX_BACKEND_SUMMED_PRODUCTS", raising=False)
    assert Settings.resolve().summed_products is True
    assert Settings.resolve(mode="reduce-overhead").summed_products is True
    # max-autotune trades compile time for the fastest calls.
    assert Settings.resolve(mode="max-autotune").summed_products is False
    assert Settings.resolve(mode="max-autotune-no-cudagraphs").summed_products is False
    assert Settings.resolve({"summed_products": True}, "max-autotune").summed_products
    assert not Settings.resolve({"summed_products": False}).summed_products
    monkeypatch.setenv("TORCH_MAX_BACKEND_SUMMED_PRODUCTS", "off")
    assert not Settings.resolve({"summed_products": True}).summed_products
    with pytest.raises(TypeError, match="'summed_products' must be a bool"):
        Settings.resolve({"summed_products": "no"})


@pytest.mark.parametrize(
    ("option", "variable"),
    [
        ("huge_pages", "TORCH_MAX_BACKEND_HUGE_PAGES"),
        ("upgrade_products", "TORCH_MAX_BACKEND_UPGRADE_PRODUCTS"),
    ],
)
def test_switches_on_by_default_from_options_and_env(monkeypatch, option, variable):
    monkeypatch.delenv(variable, raising=False)
    assert getattr(Settings.resolve(), option) is True
    assert getattr(Settings.resolve({option: False}), option) is False
    monkeypatch.setenv(variable, "0")
    assert getattr(Settings.resolve({option: True}), option) is False
    with pytest.raises(TypeError, match=f"'{option}' must be a bool"):
        Settings.resolve({option: 1})


@pytest.mark.parametrize(
    ("option", "what", "named", "other", "unknown"),
    [
        ("product_strategy", "product", "vendor", "skinny", "fastest"),
        ("conv_strategy", "convolution", "tiled", "direct", "winograd"),
    ],
)
def test_strategy_options_and_environment(
    monkeypatch, option, what, named, other, unknown
):
    variable = f"TORCH_MAX_BACKEND_{option.upper()}"
    assert getattr(Settings.resolve({}), option) == "rule"  # the suite's pin
    monkeypatch.delenv(variable)
    assert getattr(Settings.resolve({}), option) == "auto"
    assert getattr(Settings.resolve({option: named}), option) == named
    monkeypatch.setenv(variable, other)  # the environment wins
    assert getattr(Settings.resolve({option: named}), option) == other
    with pytest.raises(ValueError, match=f"'{unknown}' is not a {what} strategy"):
        Settings.resolve({option: unknown})
    monkeypatch.setenv(variable, "blas")
    with pytest.raises(ValueError, match=f"{variable}='blas'"):
        Settings.resolve({})
