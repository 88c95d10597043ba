"""A graph that loads a Mojo kernel library names its path, which lies in
the cache directory; its saved artifact is found under the same name from
another cache directory (a bundle unpacked on another machine)."""

from __future__ import annotations

from torch_max_backend.runtime.session import graph_key, portable_text
from torch_max_backend.storage.artifacts import artifact_path
from torch_max_backend.storage.cache_dir import kernel_build_dir


def _text() -> str:
    library = kernel_build_dir("0123abcd") / "kernels.mojopkg"
    return f'mo.graph @g() attributes {{_kernel_library_paths = ["{library}"]}}'


def test_artifact_keys_do_not_depend_on_the_cache_directory(monkeypatch, tmp_path):
    keys = []
    for home in ("one", "two"):
        monkeypatch.setenv("MODULAR_DERIVED_PATH", str(tmp_path / home))
        text = _text()
        assert str(tmp_path / home) in text
        portable = portable_text(text)
        assert str(tmp_path / home) not in portable
        keys.append((graph_key(portable), artifact_path(portable, "cpu").name))
    assert keys[0] == keys[1]
