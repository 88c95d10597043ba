"""A root-mean-square norm written out as ATen ops (pow, mean, add, rsqrt,
mul, mul: every llama-, T5-, Gemma- or Mistral-style model, F.rms_norm,
nn.RMSNorm) is lowered as MAX's one RMS norm kernel where MAX built two."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torch_max_backend.lower.passes.rms_norms import with_rms_norms

from .aten_graphs import aten_graphs

aten = torch.ops.aten


def _norms(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # As transformers' LlamaRMSNorm, T5LayerNorm (weight first) and Gemma's
    # (1 + weight), then torch's own.
    variance = x.pow(2).mean(-1, keepdim=True)
    llama = w * (x * torch.rsqrt(variance + 1e-6))
    t5 = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)) * w
    gemma = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w)
    return llama, t5, gemma, F.rms_norm(x, [x.shape[-1]], w, 1e-5)


def _statistics_read(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # The rsqrt is returned too: the pattern's inside is read, so it stays.
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * (x * r), r


def _inputs(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(2, 5, 40, dtype=dtype) * 3, torch.randn(40, dtype=dtype)


def _count(gm: torch.fx.GraphModule, target: object) -> int:
    return sum(1 for n in gm.graph.nodes if n.target == target)


def test_each_written_out_norm_becomes_one_node():
    (gm,) = aten_graphs(_norms, *_inputs())
    rewritten = with_rms_norms(gm)
    assert _count(rewritten, aten.rms_norm.default) == 4
    assert _count(rewritten, aten.rsqrt.default) == 0
    assert _count(rewritten, aten.pow.Tensor_Scalar) == 0
    # The graph handed in is left as it was; nothing more to find: the same
    # graph comes back.
    assert _count(gm, aten.rsqrt.default) == 4
    assert with_rms_norms(rewritten) is rewritten
    # PyTorch runs the rewritten graph as the original (a node falling back).
    for got, want in zip(rewritten(*_inputs()), gm(*_inputs()), strict=True):
        torch.testing.assert_close(got, want)


def _norm_of_a_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    first = F.rms_norm(x, [x.shape[-1]], w, 1e-5)
    return F.rms_norm(first, [x.shape[-1]], w.flip(0), 1e-6)


def test_a_norm_of_a_norm_reads_the_first_norm_s_node():
    # The second chain's input is the first chain's result, which the
    # rewrite replaces: the second node must read the first's replacement.
    (gm,) = aten_graphs(_norm_of_a_norm, *_inputs())
    rewritten = with_rms_norms(gm)
    assert _count(rewritten, aten.rms_norm.default) == 2
    rewritten.graph.lint()
    torch.testing.assert_close(rewritten(*_inputs())[0], gm(*_inputs())[0])


def test_a_norm_whose_inside_is_read_or_not_float32_stays_written_out():
    (gm,) = aten_graphs(_statistics_read, *_inputs())
    assert with_rms_norms(gm) is gm
    (half,) = aten_graphs(_norms, *_inputs(torch.bfloat16))
    assert with_rms_norms(half) is half


def test_norms_run_as_max_rms_norm_and_match_eager(max_calls, graph_texts):
    compiled = torch.compile(
        _norms, backend="max", fullgraph=True, options={"strict": True}
    )
    with torch.no_grad():
        got, want = compiled(*_inputs()), _norms(*_inputs())
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
    assert max_calls.of("inference") == 1
    (text,) = graph_texts()
    assert text.count("mo.reduce.rms_norm") == 4
    assert "rmo.mo.rsqrt" not in text
