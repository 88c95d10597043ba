"""GPU paths: run where MAX sees an accelerator, skip cleanly elsewhere.

Each check compares with eager PyTorch on the same GPU and asserts that the
compiled MAX graph ran (``max_calls``) in strict mode, so a silent fallback
to PyTorch fails the check."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_llama

from torch_max_backend import get_accelerators, max_backend

HAS_GPU = len(list(get_accelerators())) >= 2 and torch.cuda.is_available()
pytestmark = pytest.mark.skipif(not HAS_GPU, reason="no MAX-supported GPU here")


@pytest.fixture(autouse=True)
def strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_MAX_BACKEND_STRICT", "1")


def _inference_matches_eager(
    model: torch.nn.Module, x: torch.Tensor, **tolerance: float
) -> torch.Tensor:
    """``model(x)`` compiled whole, checked against eager on the same GPU."""
    with torch.no_grad():
        got = torch.compile(model, backend=max_backend, fullgraph=True)(x)
        expected = model(x)
    assert got.device == x.device and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, **tolerance)
    return got


def test_cuda_tensors_run_on_the_accelerator(max_calls):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU()).cuda().eval()
    _inference_matches_eager(
        model, torch.randn(4, 8, device="cuda"), rtol=1e-4, atol=1e-4
    )
    assert max_calls.count == 1


def test_cuda_training_step(max_calls):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).cuda()
    reference = torch.nn.Linear(3, 2).cuda()
    reference.load_state_dict(model.state_dict())
    x, y = torch.randn(4, 3, device="cuda"), torch.randn(4, 2, device="cuda")

    def step(module, optimizer):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(module(x), y)
        loss.backward()
        optimizer.step()
        return loss

    compiled = torch.compile(step, backend=max_backend)
    loss = compiled(model, torch.optim.SGD(model.parameters(), lr=0.01))
    expected = step(reference, torch.optim.SGD(reference.parameters(), lr=0.01))
    assert loss.device.type == "cuda"
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.weight, reference.weight, rtol=1e-4, atol=1e-5)
    assert max_calls.of("backward") == 1


def test_convolution_block_on_the_gpu(max_calls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )
    x = torch.randn(2, 3, 16, 16, device="cuda")
    _inference_matches_eager(model.cuda().eval(), x, rtol=1e-4, atol=1e-4)
    assert max_calls.count == 1


def test_bfloat16_products_on_the_gpu(max_calls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.SiLU())
    model = model.cuda().to(torch.bfloat16).eval()
    x = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16)
    _inference_matches_eager(model, x, rtol=2e-2, atol=2e-2)
    assert max_calls.count == 1


def test_in_place_update_of_a_cuda_input_is_written_back(max_calls):
    def bump(x):
        x.add_(1.0)
        return x * 2.0

    x = torch.randn(5, device="cuda")
    mine = x.clone()
    expected = bump(x)
    got = torch.compile(bump, backend=max_backend, fullgraph=True)(mine)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(mine, x)
    assert max_calls.count == 1


def test_a_symbolic_batch_on_the_gpu(max_calls):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).cuda().eval()
    compiled = torch.compile(model, backend=max_backend, dynamic=True)
    with torch.no_grad():
        for batch in (3, 5):
            x = torch.randn(batch, 8, device="cuda")
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert max_calls.count == 2


def _tiny_llama() -> torch.nn.Module:
    return tiny_llama().cuda()


def test_llama_forward_on_the_gpu(max_calls):
    torch.manual_seed(0)
    model = _tiny_llama()
    ids = torch.randint(0, 256, (2, 9), device="cuda")
    with torch.no_grad():
        got = torch.compile(model, backend=max_backend)(ids).logits
        expected = model(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
    assert max_calls.count >= 1


def test_llama_generate_with_a_static_cache_on_the_gpu(max_calls):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = _tiny_llama()
    ids = torch.randint(0, 256, (2, 7), device="cuda")

    def generate(compile_config=None):
        return model.generate(
            ids,
            max_new_tokens=5,
            do_sample=False,
            cache_implementation="static",
            compile_config=compile_config,
        )

    expected = generate()
    config = transformers.generation.configuration_utils.CompileConfig(backend="max")
    torch.testing.assert_close(generate(config), expected, rtol=0, atol=0)
    assert max_calls.of("inference") == 4  # every decode step; prefill is eager


def test_llama_training_step_gradients_on_the_gpu(max_calls):
    torch.manual_seed(0)
    model = _tiny_llama().train()
    reference = _tiny_llama().train()
    reference.load_state_dict(model.state_dict())
    ids = torch.randint(0, 256, (2, 9), device="cuda")
    compiled = torch.compile(model, backend=max_backend)
    compiled(ids, labels=ids).loss.backward()
    reference(ids, labels=ids).loss.backward()
    for (name, p), q in zip(
        model.named_parameters(), reference.parameters(), strict=True
    ):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4, msg=name)
    assert max_calls.of("backward") >= 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_causal_attention_forward_and_backward_on_the_gpu(max_calls, dtype):
    # bfloat16 without a mask takes torch's flash kernel on the GPU, float32
    # its memory-efficient one; both are rewritten to our attention.
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, 33, 16, device="cuda", dtype=dtype, requires_grad=True)
        for _ in range(3)
    )

    def attend(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    got = torch.compile(attend, backend=max_backend, fullgraph=True)(q, k, v)
    grads = torch.autograd.grad(got.float().square().sum(), (q, k, v))
    expected = attend(q, k, v)
    want = torch.autograd.grad(expected.float().square().sum(), (q, k, v))
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got, expected, **tol)
    for g, w in zip(grads, want, strict=True):
        torch.testing.assert_close(g, w, **tol)
    assert max_calls.of("backward") == 1


def test_float32_products_keep_float32_accuracy_on_the_gpu(max_calls):
    # MAX's GPU matmul reads float32 as TF32 (3e-4 of the scale off on an
    # H200); under torch's default precision the products are split.
    torch.manual_seed(0)
    a, b = torch.randn(64, 512, device="cuda"), torch.randn(512, 64, device="cuda")
    got = torch.compile(torch.mm, backend=max_backend, fullgraph=True)(a, b)
    want = (a.double() @ b.double()).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    assert max_calls.count == 1
