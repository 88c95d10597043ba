"""Large CPU weights a MAX graph reads are moved onto 2 MiB pages, in place.

A decode step streams every weight; on torch's 4 KiB pages GPT-2 small's
products ran 20-35 % slower (runtime/huge_pages.py). The move must keep every
byte and address, skip what is small or off, and be asked once per tensor."""

from __future__ import annotations

import pytest
import torch

from torch_max_backend.pipeline.compiling import compiled_graph as _compiled_graph
from torch_max_backend.plan import GraphPlan, InputKind, InputSource
from torch_max_backend.runtime import huge_pages
from torch_max_backend.runtime.compiled_graph import CompiledGraph
from torch_max_backend.settings import Settings

needs_collapse = pytest.mark.skipif(
    not huge_pages._supported, reason="MADV_COLLAPSE needs Linux 6.1 or later"
)


def _huge_kib_around(address: int) -> int:
    """AnonHugePages (KiB) of the mapping holding ``address``."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(part, 16) for part in head.split("-"))
                inside = low <= address < high
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.fixture(autouse=True)
def _on():
    huge_pages.set_enabled(True)
    yield
    huge_pages.set_enabled(True)


@needs_collapse
def test_a_large_weight_moves_onto_huge_pages_with_its_bytes_and_address():
    weight = torch.randn(3 * 2**20 + 77)  # 12 MiB and a little: ragged ends
    before = weight.clone()
    address = weight.data_ptr()
    collapsed = huge_pages.collapsed_bytes
    huge_pages.request(weight)
    huge_pages.wait()
    assert weight.data_ptr() == address
    assert torch.equal(weight, before)
    if huge_pages.collapsed_bytes == collapsed:
        # The move is a hint: a kernel with no free 2 MiB page at this moment
        # (memory fragmented by other processes) refuses it, and the weight
        # stays as it was, which the two checks above hold.
        pytest.skip("MADV_COLLAPSE refused now: no free huge page")
    # At least every whole 2 MiB page inside the weight moved (the pages
    # around its ragged ends too where their mapping allows).
    page = huge_pages.HUGE_PAGE
    end = address + weight.numel() * weight.element_size()
    inside = (end // page - -(-address // page)) * page
    assert huge_pages.collapsed_bytes - collapsed >= inside >= 10 * 2**20
    assert _huge_kib_around(address + 4 * 2**20) >= 2048
    # Asked once: a second request of the same memory does nothing.
    collapsed = huge_pages.collapsed_bytes
    huge_pages.request(weight)
    huge_pages.wait()
    assert huge_pages.collapsed_bytes == collapsed


def test_small_and_switched_off_tensors_are_left_alone():
    collapsed = huge_pages.collapsed_bytes
    huge_pages.request(torch.randn(2**19 - 1))  # just under 2 MiB
    huge_pages.set_enabled(False)
    huge_pages.request(torch.randn(2**21))
    huge_pages.wait()
    assert huge_pages.collapsed_bytes == collapsed


def test_a_compiled_graph_asks_for_persistent_cpu_inputs_only(monkeypatch):
    asked: list[int] = []
    monkeypatch.setattr(huge_pages, "request", lambda t: asked.append(t.data_ptr()))
    plan = GraphPlan(
        "cpu",
        (InputSource(InputKind.FX_INPUT, 0), InputSource(InputKind.FX_INPUT, 1)),
        (),
    )
    graph = CompiledGraph("huge_pages_test", None, plan)
    weight = torch.nn.Parameter(torch.randn(2**20))
    activation = torch.randn(2**20)
    graph._buffers([weight, activation])
    assert asked == [weight.data_ptr()], "a per-call tensor was asked for"
    graph._buffers([weight, activation])  # the same tensor twice: it persists
    assert asked == [weight.data_ptr(), activation.data_ptr()]
    graph._buffers([weight, activation])  # both buffers reused: nothing new
    assert len(asked) == 2


def test_the_latest_compile_switches_it(monkeypatch):
    monkeypatch.delenv("TORCH_MAX_BACKEND_HUGE_PAGES", raising=False)
    plan = GraphPlan("cpu", (), ())
    for wanted in (False, True):
        settings = Settings.resolve({"huge_pages": wanted})
        graph = _compiled_graph(plan, [], settings, "switch", (None, None, False, 0))
        assert isinstance(graph, CompiledGraph)
        assert huge_pages._enabled is wanted
