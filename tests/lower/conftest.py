"""Fixtures shared by the lowering tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from torch_max_backend.lower import product_choice
from torch_max_backend.storage import product_choices


@pytest.fixture
def choice_table(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[None]:
    """An empty table of timed product and convolution choices, in a
    directory of the test's own (MAX's own cache stays: the timing graphs
    compile once per machine)."""
    monkeypatch.setattr(product_choices, "own_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(product_choice, "_table", None)
    yield
    product_choice._table = None
