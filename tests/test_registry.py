"""The public registry: exact overload keys, user overrides, derived decompositions."""

from __future__ import annotations

import pytest
import torch
from max.graph import ops

from torch_max_backend import MAPPING_TORCH_ATEN_TO_MAX, lowering, max_backend
from torch_max_backend.lower.registry import decomposition_table

aten = torch.ops.aten


@pytest.fixture
def restore_tanh():
    original = MAPPING_TORCH_ATEN_TO_MAX[aten.tanh.default]
    yield
    MAPPING_TORCH_ATEN_TO_MAX[aten.tanh.default] = original


def test_user_override_changes_the_compiled_result(restore_tanh, max_calls):
    def doubled_tanh(x):
        return ops.mul(ops.tanh(x), ops.constant(2.0, x.dtype, device=x.device))

    MAPPING_TORCH_ATEN_TO_MAX[aten.tanh.default] = doubled_tanh
    x = torch.randn(5)
    got = torch.compile(torch.tanh, backend=max_backend)(x)
    torch.testing.assert_close(got, 2 * torch.tanh(x))
    assert max_calls.count == 1


def test_packet_key_means_default_overload(restore_tanh):
    def custom(x):
        return x

    MAPPING_TORCH_ATEN_TO_MAX[aten.tanh] = custom
    assert MAPPING_TORCH_ATEN_TO_MAX[aten.tanh.default] is custom
    assert MAPPING_TORCH_ATEN_TO_MAX[aten.tanh] is custom
    assert all(type(k) is torch._ops.OpOverload for k in MAPPING_TORCH_ATEN_TO_MAX)


def test_bad_keys_and_values_are_rejected():
    with pytest.raises(TypeError, match="keys are ATen operators"):
        MAPPING_TORCH_ATEN_TO_MAX["tanh"] = lambda x: x
    with pytest.raises(TypeError, match="must be callable"):
        MAPPING_TORCH_ATEN_TO_MAX[aten.tanh.default] = 3


def test_lowering_decorator_refuses_packets_and_duplicates():
    with pytest.raises(TypeError, match="exact overloads"):
        lowering(aten.tanh)(lambda x: x)
    with pytest.raises(ValueError, match="registered twice"):
        lowering(aten.tanh.default)(lambda x: x)


def test_decompositions_skip_lowered_ops():
    table = decomposition_table()
    # We lower these ourselves, so they must reach us undecomposed...
    for op in (
        aten.native_layer_norm.default,
        aten._softmax.default,
        aten.addmm.default,
    ):
        assert op in MAPPING_TORCH_ATEN_TO_MAX
        assert op not in table
    # ...while ops we do not lower keep their decomposition.
    assert aten.hardswish_backward.default not in MAPPING_TORCH_ATEN_TO_MAX
    assert aten.hardswish_backward.default in table


def test_a_lowering_registered_later_leaves_the_decomposition_table():
    # The core table is read once per process; which ops we lower is not.
    op = aten.hardswish_backward.default
    assert op in decomposition_table()
    MAPPING_TORCH_ATEN_TO_MAX[op] = lambda *args: args
    try:
        assert op not in decomposition_table()
    finally:
        del MAPPING_TORCH_ATEN_TO_MAX[op]
    assert op in decomposition_table()


def test_a_lowering_by_name_takes_effect_once_its_library_defines_the_op(max_calls):
    # As the backend registers transformers' grouped product: by name, before
    # the library that defines the op is imported.
    @lowering("max_deferred_test::twice")
    def twice(x):
        return ops.mul(x, ops.constant(2.0, x.dtype, device=x.device))

    assert "max_deferred_test::twice" in MAPPING_TORCH_ATEN_TO_MAX.deferred_names()

    @torch.library.custom_op("max_deferred_test::twice", mutates_args=())
    def twice_op(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    twice_op.register_fake(lambda x: torch.empty_like(x))
    op = torch.ops.max_deferred_test.twice.default
    assert op in MAPPING_TORCH_ATEN_TO_MAX and MAPPING_TORCH_ATEN_TO_MAX[op] is twice
    x = torch.randn(4)
    compiled = torch.compile(
        torch.ops.max_deferred_test.twice, backend=max_backend, options={"strict": True}
    )
    torch.testing.assert_close(compiled(x), 2 * x)
    assert max_calls.count == 1
    with pytest.raises(ValueError, match="'namespace::name'"):
        lowering("max_deferred_test.twice")(twice)
    with pytest.raises(ValueError, match="registered twice"):
        lowering("max_deferred_test::twice")(twice)
    # Removing it removes the name too: later tests (docs/ops.md's table) see
    # the package's own lowerings only.
    del MAPPING_TORCH_ATEN_TO_MAX[op]
    assert "max_deferred_test::twice" not in MAPPING_TORCH_ATEN_TO_MAX.deferred_names()
    assert op not in MAPPING_TORCH_ATEN_TO_MAX


def test_every_lowering_documents_its_schemas():
    # One function may serve several overloads; its docstring then lists the
    # exact schema of each, one per line.
    for op, fn in MAPPING_TORCH_ATEN_TO_MAX.items():
        if not fn.__module__.startswith("torch_max_backend.lower.ops."):
            continue  # registered by a test or an example (mojo_op), not ours
        lines = [line.strip() for line in (fn.__doc__ or "").strip().splitlines()]
        schema = str(op._schema).removeprefix("aten::")
        assert schema in lines, f"{op}: docstring lacks its schema {schema}"


_OLD_PATHS = """
import warnings
warnings.simplefilter("error", DeprecationWarning)
from torch_max_backend import lowering
assert callable(lowering) and lowering.__module__ == "torch_max_backend.lower.registry"
warnings.simplefilter("always", DeprecationWarning)
with warnings.catch_warnings(record=True) as caught:
    from torch_max_backend.lowering.registry import MAPPING_TORCH_ATEN_TO_MAX
import torch_max_backend.lower.registry as registry
assert MAPPING_TORCH_ATEN_TO_MAX is registry.MAPPING_TORCH_ATEN_TO_MAX
messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
assert any("import torch_max_backend.lower.registry instead" in m for m in messages), messages
import torch_max_backend
assert callable(torch_max_backend.lowering)  # still registers lowerings
with warnings.catch_warnings(record=True) as caught:
    from torch_max_backend.fallback import FallbackWarning
    import torch_max_backend.lower.builder.folding as folding
    from torch_max_backend.kernels.mojo_op import mojo_op
import torch_max_backend.pipeline.fallback as fallback
import torch_max_backend.lower.passes.folding as new_folding
assert FallbackWarning is fallback.FallbackWarning is torch_max_backend.FallbackWarning
assert folding is new_folding
assert mojo_op is torch_max_backend.mojo_op
messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
assert any("import torch_max_backend.pipeline.fallback instead" in m for m in messages)
"""


def test_the_decorator_is_public_and_old_module_paths_still_import():
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", _OLD_PATHS], check=True)
