"""`training.attnImplementation: auto` on CPUs: eager attention for short rows, sdpa for long.

PyTorch's sdpa on a CPU runs its flash kernel, whose memory stays linear in the row's length.
At the short rows of RL batches (~100 tokens) its backward is the update's slowest op after the
weight matmuls: at the benchmark's size L (bf16, 32 rows x 94 tokens, left padding, one
thread) a forward+backward took 8.5-10.0 CPU seconds with sdpa, 7.8-8.4 with sdpa's math
kernel and 6.3 with eager attention (its batched matmuls and softmax); the torch profiler put
the flash backward at 22 % of the update's CPU time (~1.1 s per layer).

Eager keeps the `[rows, heads, q, k]` probabilities of every layer for the backward, so it is
taken only while `rows x heads x q x k <= EAGER_MAX_SCORES`, and only in bf16/fp16 (the slow
backward is the half-precision kernel's; fp32 keeps sdpa: 1 thread, same batch, sdpa 15.8-21.4
CPU seconds, eager 16.1-19.6, no gain to take). The choice is made once per forward from the
shapes and dtype alone, when the mask is built (`cpu_auto_mask`: eager's additive float mask,
else sdpa's own mask), and the attention follows the mask's kind; so a recomputed forward
(gradient checkpointing) takes the kernel its forward took, and long rows and fp32 run stock
sdpa exactly as before. Padding and packed sequences' block diagonal are in either mask.

Registered with transformers under `CPU_AUTO` (its documented extension point,
`AttentionInterface` and `AttentionMaskInterface`); `models.loading.attention_kernel` returns
that name for `auto` on CPUs.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import Tensor, nn

CPU_AUTO = "rlhf_cpu_auto"
# Probabilities per layer at which eager gives way to sdpa: 16 Mi scores (32 MiB in bf16) per
# layer; 32 rows x 12 heads x 94^2 tokens = 3.4 Mi.
EAGER_MAX_SCORES = 2**24


def use_eager(rows: int, heads: int, q_len: int, kv_len: int, dtype: torch.dtype) -> bool:
    """Whether a forward's attention takes eager: half precision, short rows (see above)."""
    half = dtype in (torch.bfloat16, torch.float16)
    return half and rows * heads * q_len * kv_len <= EAGER_MAX_SCORES


def cpu_auto_mask(
    batch_size: int, q_length: int, kv_length: int, *, dtype: torch.dtype, config: Any, **kw: Any
) -> Tensor | None:
    """The mask of the kernel the forward takes: eager's additive float mask, else sdpa's own
    (boolean, or None for a plain causal row): the long-row and fp32 path is stock sdpa."""
    from transformers.masking_utils import eager_mask, sdpa_mask

    heads = int(getattr(config.get_text_config(), "num_attention_heads", 1) or 1)
    if use_eager(batch_size, heads, q_length, kv_length, dtype):
        mask: Tensor = eager_mask(batch_size, q_length, kv_length, dtype=dtype, **kw)
        return mask
    sdpa: Tensor | None = sdpa_mask(batch_size, q_length, kv_length, **kw)
    return sdpa


def cpu_auto_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """Eager where `cpu_auto_mask` built eager's float mask, else sdpa."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    # The architecture's own eager kernel (softcapping, sinks, key/value head groups are its
    # own business), from the module that defines the attention layer.
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    float_mask = attention_mask is not None and attention_mask.is_floating_point()
    if eager is not None and float_mask:
        out: tuple[Tensor, Tensor | None] = eager(
            module, query, key, value, attention_mask, **kwargs
        )
        return out
    long: tuple[Tensor, Tensor | None] = sdpa_attention_forward(
        module, query, key, value, attention_mask, **kwargs
    )
    return long


def register() -> str:
    """Register `CPU_AUTO` with transformers (idempotent); returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(CPU_AUTO, cpu_auto_attention)
    AttentionMaskInterface.register(CPU_AUTO, cpu_auto_mask)
    return CPU_AUTO
