"""A llama-style decode step on MAX: the static KV cache is updated in place
(one token's keys and values stored into their slot of the cache's own MAX
buffer, not scattered into a copy of the whole cache that is then written
back), and attention reads the grouped cache itself, not the per-query-head
copy that transformers' repeat_kv makes."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from torch_max_backend import max_backend
from torch_max_backend.lower.kit import unrepeated
from torch_max_backend.lower.passes import analyzed

from .aten_graphs import aten_graphs
from .repeat_kv import repeat_kv

CAPACITY = 24


class StaticCache(torch.nn.Module):
    """transformers' StaticCache update, then attention over it with a mask,
    key/value heads repeated per query head as llama does."""

    def __init__(self, read_old: bool = False) -> None:
        super().__init__()
        self.register_buffer("keys", torch.zeros(2, 2, CAPACITY, 8))
        self.register_buffer("values", torch.zeros(2, 2, CAPACITY, 8))
        self.read_old = read_old

    def forward(self, q, k, v, position, mask):
        old = self.keys.sum() if self.read_old else 0.0
        self.keys.index_copy_(2, position, k)
        self.values.index_copy_(2, position, v)
        keys, values = repeat_kv(self.keys, 2), repeat_kv(self.values, 2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return out + old


def _step(t: int, tokens: int = 1) -> tuple[torch.Tensor, ...]:
    q = torch.randn(2, 4, tokens, 8)
    k, v = torch.randn(2, 2, tokens, 8), torch.randn(2, 2, tokens, 8)
    position = torch.arange(t, t + tokens)
    mask = (torch.arange(CAPACITY) <= t + tokens - 1).view(1, 1, 1, CAPACITY)
    return q, k, v, position, mask


def _aten_graph(module: torch.nn.Module, tokens: int) -> torch.fx.GraphModule:
    return aten_graphs(module, *_step(0, tokens), keep_inference_input_mutations=True)[
        0
    ]


@pytest.mark.parametrize(
    ("read_old", "tokens", "found"),
    [(False, 1, 2), (True, 1, 1), (False, 3, 0)],
    ids=["one-token", "old-keys-read-elsewhere", "three-tokens"],
)
def test_only_one_position_writes_of_an_otherwise_unread_cache_go_in_place(
    read_old, tokens, found
):
    gm = _aten_graph(StaticCache(read_old), tokens)
    writes = analyzed(gm).slot_writes
    # Reading the old keys keeps their update functional; the values' still
    # goes in place. Three positions at once stay functional.
    assert len(writes) == found
    assert all(w.dim == 2 for w in writes.values())


def test_a_decode_step_updates_the_cache_in_place(max_calls, caplog):
    torch.manual_seed(0)
    eager, compiled_module = StaticCache(), StaticCache()
    compiled = torch.compile(
        compiled_module, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    caplog.set_level(logging.DEBUG, logger="torch_max_backend.graphs")
    with torch.no_grad():
        for t in [0, 1, 2, CAPACITY - 1]:  # up to the cache's last slot
            inputs = _step(t)
            torch.testing.assert_close(
                compiled(*inputs), eager(*inputs), rtol=1e-5, atol=1e-5
            )
    torch.testing.assert_close(compiled_module.keys, eager.keys, rtol=0, atol=0)
    torch.testing.assert_close(compiled_module.values, eager.values, rtol=0, atol=0)
    # A position past the cache raises as in eager (checked once for both),
    # and, as in eager, writes nothing: no slot of either cache changes.
    with torch.no_grad(), pytest.raises(IndexError, match="out of bounds"):
        compiled(*_step(CAPACITY))
    torch.testing.assert_close(compiled_module.keys, eager.keys, rtol=0, atol=0)
    torch.testing.assert_close(compiled_module.values, eager.values, rtol=0, atol=0)
    assert max_calls.of("inference") == 5  # one graph, every position
    graph = "\n".join(
        r.getMessage() for r in caplog.records if "MAX graph" in r.getMessage()
    )
    # Each cache's slot is written by our kernel, which reads the position
    # itself and skips a refused write: no condition, no index vectors built
    # for MAX's slice store (a GPT-2 decode step's 24 stores had been 288 of
    # its 740 kernel launches).
    assert graph.count('symbol = "torch_max_backend_write_slot"') == 2
    assert "mo.mutable.store.slice" not in graph
    assert "mo.if" not in graph
    assert "rmo.concat" not in graph
    # Both writes share one position: its bounds (wrapped, checked, clamped,
    # and the slot's end) are computed once, not per layer's cache.
    assert graph.count("rmo.greater_equal(") == 1
    # Nothing stores a whole cache, and nothing scatters into a copy of one.
    assert "mo.mutable.store" not in graph
    assert "scatter" not in graph
    # Attention's scores read the key cache along its rows: no transposed
    # copy of it (each layer's had been a kernel of its own every token).
    assert "transpose" not in graph
    # Attention of one query row is our kernel (lower/ops/attention.py's
    # one_query), which reads the caches' 2 key/value heads, never 4 copies,
    # and no product is built for it.
    (attention,) = [
        line
        for line in graph.splitlines()
        if 'symbol = "torch_max_backend_one_query_attention"' in line
    ]
    assert attention.count(f"[2, 2, {CAPACITY}, 8]") == 2
    assert f"[2, 4, {CAPACITY}" not in attention
    assert "rmo.matmul" not in graph


def test_repeat_kv_is_seen_through_only_as_transformers_writes_it():
    gm = _aten_graph(StaticCache(), 1)
    (attention,) = analyzed(gm).repeated_kv
    sources = dict(analyzed(gm).repeated_kv[attention])
    # Both repeats lead back to the caches' updated values.
    assert sorted(sources) == [1, 2]
    assert all(s.target is torch.ops.aten.index_put.default for s in sources.values())
    # The query, which no repeat made, is left as it is.
    assert unrepeated(attention.args[0]) is None


class TwoLengths(torch.nn.Module):
    """Two caches of different lengths written at one position node."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("long", torch.zeros(1, 2, CAPACITY, 8))
        self.register_buffer("short", torch.zeros(1, 2, 8, 8))

    def forward(self, k, position):
        self.long.index_copy_(2, position, k)
        self.short.index_copy_(2, position, k)
        # Both caches read after their stores and combined: MAX 26.7's
        # compiler crashed on this while the stores were conditional and the
        # caches were read outside the conditions.
        return self.long.sum(2) + self.short.sum(2)


def test_one_position_is_checked_against_each_cache_length():
    eager, compiled_module = TwoLengths(), TwoLengths()
    compiled = torch.compile(
        compiled_module, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    k = torch.randn(1, 2, 1, 8)
    gm = aten_graphs(
        TwoLengths(), k, torch.tensor([3]), keep_inference_input_mutations=True
    )[0]
    assert len(analyzed(gm).slot_writes) == 2  # both in place
    with torch.no_grad():
        torch.testing.assert_close(
            compiled(k, torch.tensor([3])), eager(k, torch.tensor([3]))
        )
        # Inside the long cache, past the short one: eager writes the long
        # one, then raises; the short one is never written at a clamped slot.
        with pytest.raises(IndexError, match="out of bounds"):
            eager(k, torch.tensor([10]))
        with pytest.raises(IndexError, match="out of bounds"):
            compiled(k, torch.tensor([10]))
    torch.testing.assert_close(compiled_module.long, eager.long, rtol=0, atol=0)
    torch.testing.assert_close(compiled_module.short, eager.short, rtol=0, atol=0)


class CountedCache(torch.nn.Module):
    """transformers' StaticCache as it counts: the slot comes from a length
    buffer that the step then advances (``cumulative_length.add_(1)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("keys", torch.zeros(1, 2, CAPACITY, 8))
        self.register_buffer("length", torch.zeros((), dtype=torch.int64))

    def forward(self, k):
        position = torch.arange(1) + self.length
        self.length.add_(1)
        self.keys.index_copy_(2, position, k)
        return self.keys.sum(2)


def test_a_cache_written_at_its_own_length_then_counted_compiles_on_max(max_calls):
    # MAX 26.7 refused this graph ("operand #0 does not dominate this use")
    # when the slot's store was conditional and the cache was read after it,
    # outside the condition, before the length's store.
    eager, compiled_module = CountedCache(), CountedCache()
    compiled = torch.compile(
        compiled_module, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    with torch.no_grad():
        for _ in range(3):
            k = torch.randn(1, 2, 1, 8)
            torch.testing.assert_close(compiled(k), eager(k))
    assert max_calls.of("inference") == 3
    torch.testing.assert_close(compiled_module.keys, eager.keys, rtol=0, atol=0)
    assert int(compiled_module.length) == 3


class OddCaches(torch.nn.Module):
    """A slot whose run along the last dim is a vector and a tail (19
    values), and a slot along the last dim itself."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("wide", torch.zeros(2, 3, CAPACITY, 19))
        self.register_buffer("flat", torch.zeros(2, 3, CAPACITY))

    def forward(self, k, f, position):
        self.wide.index_copy_(2, position, k)
        self.flat.index_copy_(2, position, f)
        return self.wide.sum(2) + self.flat.sum(2, keepdim=True)


def test_slots_with_a_ragged_run_or_along_the_last_dim_match_eager(max_calls):
    eager, compiled_module = OddCaches(), OddCaches()
    compiled = torch.compile(
        compiled_module, backend=max_backend, fullgraph=True, options={"strict": True}
    )
    with torch.no_grad():
        for t in (0, 5, CAPACITY - 1):
            k, f = torch.randn(2, 3, 1, 19), torch.randn(2, 3, 1)
            position = torch.tensor([t])
            torch.testing.assert_close(compiled(k, f, position), eager(k, f, position))
    assert max_calls.of("inference") == 3
    torch.testing.assert_close(compiled_module.wide, eager.wide, rtol=0, atol=0)
    torch.testing.assert_close(compiled_module.flat, eager.flat, rtol=0, atol=0)
    gm = aten_graphs(
        OddCaches(),
        torch.randn(2, 3, 1, 19),
        torch.randn(2, 3, 1),
        torch.tensor([0]),
        keep_inference_input_mutations=True,
    )[0]
    assert len(analyzed(gm).slot_writes) == 2  # both in place
