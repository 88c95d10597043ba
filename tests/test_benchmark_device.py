"""``--device cuda`` of the benchmark suite and the decode benchmark, checked
on the CPU: its option, the GPU's docs section between markers of its own
(the CPU vendors' left alone) and the machine line naming the GPU. Cheap:
nothing compiles."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from benchmarks import decode_docs, device, report
from benchmarks.docs_sections import replace_section


def test_device_option_defaults_to_cpu_and_knows_cuda():
    parser = argparse.ArgumentParser()
    device.add_argument(parser)
    assert parser.parse_args([]).device == "cpu"
    assert parser.parse_args(["--device", "cuda"]).device == "cuda"
    with pytest.raises(SystemExit):
        parser.parse_args(["--device", "tpu"])
    # A CPU run's children are started exactly as before.
    assert device.child_args("cpu") == []
    assert device.child_args("cuda") == ["--device", "cuda"]


def test_cuda_is_refused_where_pytorch_sees_no_gpu(monkeypatch, capsys):
    import torch

    from benchmarks.run import main as run_main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        run_main(["--models", "mlp", "--device", "cuda"])
    assert "sees no CUDA GPU" in capsys.readouterr().err


def _machine(vendor: str, gpu: str | None = None) -> dict:
    found = {
        "cpu": f"Test {vendor} CPU",
        "cpu_vendor": vendor,
        "last_level_cache": "L3 32 MiB",
        "cores": 2,
        "memory_gib": 8.0,
        "gpu": gpu,
        "vendor_blas": "none",
        "python": "3.12.0",
        "torch": "2.11.0",
        "max": "26.7.0",
    }
    if gpu:
        found["gpu_memory_gib"] = 139.8
    return found


def _results(vendor: str, where: str = "cpu", gpu: str | None = None) -> dict:
    row = {"case": "mlp", "caches": "cold", "first_call_s": 1.0, "median_ms": 2.0}
    row.update(p10_ms=1.9, p90_ms=2.1, throughput_per_s=32.0, peak_rss_mib=900.0)
    rows = [
        {**row, "backend": "eager", "max_abs_error": 0.0},
        {**row, "backend": "max", "median_ms": 1.0, "max_abs_error": 1e-6},
    ]
    results = {
        "machine": _machine(vendor, gpu),
        "command": "python -m benchmarks.run --docs",
        "duration_s": 60.0,
        "rows": rows,
        "overhead": {"graph_us": 12.0, "execute_us": 10.0},
    }
    if where == "cuda":
        results["command"] += " --device cuda"
        results["device"] = "cuda"
        results["overhead"] = None
    return results


def test_a_gpu_run_writes_its_own_section_after_the_cpu_vendors(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nIntro.\n\n## Compile time\n\nOld.\n")
    report.write_docs(_results("AMD"), tmp_path)
    report.write_docs(_results("Intel"), tmp_path)
    cpu_text = page.read_text()
    gpu = _results("AMD", "cuda", "NVIDIA H200")
    report.write_docs(gpu, tmp_path)
    report.write_docs(gpu, tmp_path)  # a second run replaces, never appends
    text = page.read_text()
    begin, end = report.docs_markers("GPU", "cuda")
    assert begin == (
        "<!-- benchmark suite on GPU: begin "
        "(python -m benchmarks.run --docs --device cuda) -->"
    )
    assert end == "<!-- benchmark suite on GPU: end -->"
    assert text.count(begin) == 1 and text.count(end) == 1
    for vendor in ("AMD", "Intel"):  # the CPU sections as they were
        b, e = report.docs_markers(vendor)
        section = cpu_text[cpu_text.index(b) : cpu_text.index(e)]
        assert section in text and text.index(e) < text.index(begin)
    assert text.index(end) < text.index("## Compile time")
    gpu_section = text[text.index(begin) : text.index(end)]
    assert "## Side by side on GPU (NVIDIA H200)" in gpu_section
    assert "GPU NVIDIA H200, 139.8 GiB" in gpu_section
    assert "Performance targets" not in gpu_section
    assert (tmp_path / "speedup-gpu.png").read_bytes()[:4] == b"\x89PNG"


def test_a_gpu_decode_section_leaves_the_cpu_vendors_alone(tmp_path, monkeypatch):
    page = tmp_path / "benchmarks.md"
    amd, intel = decode_docs.docs_markers("AMD"), decode_docs.docs_markers("Intel")
    page.write_text(
        f"# B\n\n{amd[0]}\namd\n{amd[1]}\n\n{intel[0]}\nintel\n{intel[1]}\n\n## After\n"
    )
    monkeypatch.setattr(decode_docs, "machine", lambda: _machine("AMD", "NVIDIA H200"))
    args = SimpleNamespace(
        command="python -m benchmarks.decode --docs --device cuda",
        device="cuda",
        prompt=32,
        new_tokens=32,
        runs=5,
        repeat=1,
        batches=[1],
        caches="cold",
    )
    section = decode_docs.markdown(("speed", "first"), args, None, 3.0)
    begin, end = decode_docs.docs_markers("GPU", "cuda")
    assert begin == (
        "<!-- decode on GPU: begin (python -m benchmarks.decode --docs --device cuda) -->"
    )
    assert section.startswith(begin) and section.endswith(end)
    assert "## Decoding on GPU (NVIDIA H200)" in section
    replace_section(page, begin, end, section)
    replace_section(page, begin, end, section)
    text = page.read_text()
    assert text.count(begin) == 1 and "amd" in text and "intel" in text
    assert text.index(intel[1]) < text.index(begin) < text.index("## After")


def test_the_machine_line_names_the_gpu(monkeypatch):
    import torch

    from benchmarks import machine as machine_module

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H200")
    props = SimpleNamespace(total_memory=150_000_000_000)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_: props)
    found = machine_module.machine()
    assert device.gpu_line(found) == "NVIDIA H200, 139.7 GiB"
    monkeypatch.setattr(decode_docs, "machine", lambda: found)
    assert "; GPU: NVIDIA H200, 139.7 GiB; vendor BLAS" in decode_docs.machine_line(
        "cuda"
    )
    assert "GPU" not in decode_docs.machine_line("cpu")


def test_the_decode_table_marks_the_cpu_only_runs_on_a_gpu():
    from benchmarks.decode_tables import _rows

    figures = {"tokens_per_s": 10.0, "bytes_per_step": 1e9, "tokens": [[1]]}
    results = {"gpt2": {b: {"1": dict(figures)} for b in ("eager", "inductor", "max")}}
    (row,) = _rows(results, None, "cuda")
    assert row[4:7] == ["10.0", "-", "-"]
    assert row[-2] == "-"  # no bandwidth bound on a GPU
