"""Settings, environment flags, devices and runtime type checks."""

from __future__ import annotations

import pytest
import torch

import torch_max_backend
from torch_max_backend import get_accelerators, max_backend
from torch_max_backend.errors import InternalTypeError
from torch_max_backend.lowering.shapes import normalize_dim
from torch_max_backend.settings import Settings


def test_defaults_options_and_env_precedence(monkeypatch):
    monkeypatch.delenv("TORCH_MAX_BACKEND_VERBOSE", raising=False)
    monkeypatch.delenv("PYTORCH_MAX_BACKEND_VERBOSE", raising=False)
    monkeypatch.delenv("TORCH_MAX_BACKEND_PROFILE", raising=False)
    monkeypatch.delenv("PYTORCH_MAX_BACKEND_PROFILE", raising=False)
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


def test_profile_and_verbose_print_graphs_and_timings(monkeypatch, capsys):
    monkeypatch.setenv("TORCH_MAX_BACKEND_PROFILE", "1")
    monkeypatch.setenv("TORCH_MAX_BACKEND_VERBOSE", "true")

    @torch.compile(backend=max_backend)
    def simple_math(x, y):  # the structure of test_simple_math: a cache hit
        return x + y * 2

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(simple_math(x, y), x + y * 2)
    out = capsys.readouterr().out
    assert "ATen graph inference_" in out and "aten.mul.Tensor" in out
    assert "MAX graph inference_" in out and "rmo.add" in out
    assert "compiled inference_" in out
    from torch_max_backend.runtime.compiled_graph import profile_table

    table = profile_table()
    assert "inference_" in table and "run mean us" in table


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
