"""`training.attnImplementation: auto` on CPUs: eager attention for short rows, sdpa for long.

PyTorch's sdpa on a CPU runs its flash kernel, whose memory stays linear in the row's length.
At the short rows of RL batches (~100 tokens) its backward is the update's slowest op after the
weight matmuls: at the benchmark's size L (bf16, 32 rows x 94 tokens, left padding, one
thread) a forward+backward took 8.5-10.0 CPU seconds with sdpa, 7.8-8.4 with sdpa's math
kernel and 6.3 with eager attention (its batched matmuls and softmax); the torch profiler put
the flash backward at 22 % of the update's CPU time (~1.1 s per layer).

Eager keeps the `[rows, heads, q, k]` probabilities of every layer for the backward, so it is
taken only while `rows x heads x q x k <= EAGER_MAX_SCORES`; longer rows stay on sdpa. The
choice is a function of the shapes alone, so a recomputed forward (gradient checkpointing)
takes the kernel its forward took. Both kernels get the same additive float mask (transformers'
`eager_mask`: causal, padding and packed sequences' block diagonal).

Registered with transformers under `CPU_AUTO` (its documented extension point,
`AttentionInterface` and `AttentionMaskInterface`); `models.loading.attention_kernel` returns
that name for `auto` on CPUs.
"""

from __future__ import annotations

import sys
from typing import Any

from torch import Tensor, nn

CPU_AUTO = "rlhf_cpu_auto"
# Probabilities per layer at which eager gives way to sdpa: 16 Mi scores (32 MiB in bf16) per
# layer; 32 rows x 12 heads x 94^2 tokens = 3.4 Mi.
EAGER_MAX_SCORES = 2**24


def use_eager(query: Tensor, key: Tensor) -> bool:
    """Whether eager attention takes `query [B, H, q, d]` against `key [B, H_kv, k, d]`."""
    rows, heads, q_len = query.shape[0], query.shape[1], query.shape[2]
    return rows * heads * q_len * key.shape[2] <= EAGER_MAX_SCORES


def cpu_auto_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    # The architecture's own eager kernel (softcapping, sinks, key/value head groups are its
    # own business), from the module that defines the attention layer.
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is not None and use_eager(query, key):
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
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(CPU_AUTO, cpu_auto_attention)
    AttentionMaskInterface.register(CPU_AUTO, eager_mask)
    return CPU_AUTO
