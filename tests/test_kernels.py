"""Mojo kernels: the package's own (integer bitwise ops), building and caching
libraries, build errors, loading a library only into graphs that use it, and
the mojo_op API's checks. (A user kernel end to end: the example
custom_op_no_graph_break.py, run by tests/test_examples.py.)"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torch_max_backend
from torch_max_backend import (
    KernelBuildError,
    MojoLibrary,
    compile_stats,
    max_backend,
    mojo_op,
    reset_compile_stats,
)
from torch_max_backend.kernels.library import ATTENTION, SHIPPED
from torch_max_backend.lower.builder import build_graph
from torch_max_backend.runtime import session

GOOD_KERNEL = """
import extensibility
from extensibility import InputTensor, OutputTensor, foreach
from max.gpu.host import DeviceContext
from std.utils.coord import Coord


@extensibility.register("twice")
struct Twice:
    @staticmethod
    def execute[dtype: DType, rank: Int, //, target: StaticString](
        output: OutputTensor[dtype=dtype, rank=rank, ...],
        x: InputTensor[dtype=dtype, rank=rank, ...],
        ctx: DeviceContext,
    ) raises:
        def func[width: Int](idx: Coord) {var} -> SIMD[dtype, width]:
            return x.load[width](idx) + x.load[width](idx)

        foreach[target=target](func, output, ctx)
"""


def _bitwise(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> list[torch.Tensor]:
    return [a & b, a | 6, a ^ c, ~b, (a > 0) & (c > 0)]


def test_integer_bitwise_ops_run_the_shipped_kernel(max_calls):
    torch.manual_seed(0)
    a = torch.randint(-1000, 1000, (3, 5), dtype=torch.int32)
    b = torch.randint(-1000, 1000, (3, 5), dtype=torch.int32)
    c = torch.randint(-(2**40), 2**40, (5,), dtype=torch.int64)  # promotes, broadcasts
    reset_compile_stats()
    compiled = torch.compile(_bitwise, backend=max_backend, options={"strict": True})
    for got, want in zip(compiled(a, b, c), _bitwise(a, b, c), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert max_calls.count == 1
    record = session.COMPILE_LOG[-1]
    assert record.kernel_libraries == (str(SHIPPED.path()),)
    stats = compile_stats()
    assert stats.kernel_graphs == stats.max_compiles == 1


def test_graphs_without_custom_ops_load_no_kernel_library():
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (torch.relu(x @ y) > 0) & (x > 0)  # on bools: MAX's own ops

    gm = make_fx(f)(torch.randn(4, 4), torch.randn(4, 4))
    assert build_graph(gm).graph.kernel_libraries_paths == []
    gm = make_fx(lambda x: ~x)(torch.ones(4, dtype=torch.int16))
    assert build_graph(gm).graph.kernel_libraries_paths == [SHIPPED.path()]


def test_a_graph_of_two_libraries_leaves_the_next_graphs_theirs():
    # MAX reuses a checked analysis of one library set for later graphs:
    # the library a graph adds after its first kernel was checked must not
    # reach the next graphs that load only the first.
    def attention(q, k):
        return torch.nn.functional.scaled_dot_product_attention(q, k, k)

    q, k, x = torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 5, 8), torch.ones(4).short()
    gm = make_fx(lambda x, q, k: (~x, attention(q, k)))(x, q, k)
    assert set(build_graph(gm).graph.kernel_libraries_paths) == {
        SHIPPED.path(),
        ATTENTION.path(),
    }
    gm = make_fx(lambda x: ~x)(x)
    assert build_graph(gm).graph.kernel_libraries_paths == [SHIPPED.path()]
    gm = make_fx(attention)(q, k)
    assert build_graph(gm).graph.kernel_libraries_paths == [ATTENTION.path()]


def test_float_bitwise_is_refused_with_its_reason():
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.bitwise_not.default(x)

    gm = make_fx(f)(torch.ones(3, dtype=torch.int8))
    gm.graph.find_nodes(op="placeholder")[0].meta["val"] = torch.ones(3).to("meta")
    from torch_max_backend.lower.builder import why_unsupported

    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    reason = why_unsupported(node)
    assert reason is not None and "torch takes bool and integer tensors" in str(reason)


def test_library_is_built_once_and_rebuilt_when_edited(tmp_path, monkeypatch):
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(tmp_path / "derived"))
    source = tmp_path / "twice.mojo"
    source.write_text(GOOD_KERNEL)
    library = MojoLibrary("twice_kernels", source)
    built = library.path()
    assert built.suffix == ".mojoc" and built.is_file()
    assert built.is_relative_to(tmp_path / "derived")
    stamp = built.stat().st_mtime_ns
    assert MojoLibrary("twice_kernels", source).path() == built  # a cache hit
    assert built.stat().st_mtime_ns == stamp
    source.write_text(GOOD_KERNEL + "\n# edited\n")
    rebuilt = library.path()
    assert rebuilt != built and rebuilt.is_file()
    # Nothing half-written is left beside the builds.
    leftovers = [p for p in rebuilt.parent.parent.rglob(".build-*")]
    assert leftovers == []


def test_kernel_with_a_syntax_error_names_the_file_and_the_compiler_message(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("MODULAR_DERIVED_PATH", str(tmp_path / "derived"))
    source = tmp_path / "broken.mojo"
    source.write_text(
        GOOD_KERNEL.replace("x.load[width](idx) + x", "x.load[width](idx) +* x")
    )
    with pytest.raises(KernelBuildError) as caught:
        MojoLibrary("broken_kernels", source).path()
    message = str(caught.value)
    assert "'broken_kernels'" in message
    assert f"{source}:" in message  # the compiler's location, in the user's file
    assert "error:" in message
    # No library was published for the broken source.
    assert not list((tmp_path / "derived").rglob("*.mojoc"))


def test_mojo_op_checks_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="'namespace::op'"):
        mojo_op("twice", tmp_path / "twice.mojo")
    with pytest.raises(FileNotFoundError, match=r"absent\.mojo does not exist"):
        mojo_op("tests::absent", tmp_path / "absent.mojo")
    source = tmp_path / "twice.mojo"
    source.write_text(GOOD_KERNEL)

    @mojo_op("tests_kernels::twice", source)
    def twice(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    # Registered with PyTorch and with the backend's registry.
    assert torch.ops.tests_kernels.twice.default in (
        torch_max_backend.MAPPING_TORCH_ATEN_TO_MAX
    )
    with pytest.raises(TypeError, match="tensors and bool/int/float/str parameters"):
        twice._mojo.split([[1, 2]], {})


def test_a_kernel_source_is_named_by_its_content_not_its_place(tmp_path):
    # A clone of the project in another folder must reuse the built library
    # and the compiled graphs that name it: the library's name (so its build
    # and the graph text) follows the source's content, not its path.
    places = [tmp_path / "one", tmp_path / "two", tmp_path / "edited"]
    for place in places:
        place.mkdir()
        (place / "moved.mojo").write_text(GOOD_KERNEL)
    (places[2] / "moved.mojo").write_text(GOOD_KERNEL + "\n# edited\n")
    ops = []
    for i, place in enumerate(places):

        @mojo_op(f"tests_kernels::moved_{i}", place / "moved.mojo")
        def moved(x: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(x)

        ops.append(moved._mojo.library)
    same, other, edited = ops
    assert same.name == other.name and same.digest() == other.digest()
    assert edited.name != same.name and edited.name.startswith("mojo_moved_")


def test_every_shipped_kernel_library_is_package_data():
    # A library missing from pyproject.toml's package data works in a
    # checkout and fails in every installed wheel, where its sources are
    # absent: each directory of Mojo sources the package holds is listed.
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with open(root / "pyproject.toml", "rb") as f:
        listed = set(
            tomllib.load(f)["tool"]["setuptools"]["package-data"]["torch_max_backend"]
        )
    package = root / "torch_max_backend"
    folders = {f.parent for f in package.rglob("*.mojo")}
    assert len(folders) >= 10
    for folder in folders:
        pattern = f"{folder.relative_to(package).as_posix()}/*.mojo"
        assert pattern in listed, f"add {pattern!r} to the package data"
