"""torch's fused AdamW that clips the gradients itself and reports their norm, for ZeRO stage 0
in fp32.

At stage 0 without bf16, DeepSpeed steps a plain torch optimizer: it clips through
`clip_grad_norm_` and drops the norm it computed, so `engine.get_global_grad_norm()` is None and
the step's `grad_norm` (a metric the health check watches) would be missing. Here the norm is
taken once, kept as `_global_grad_norm` (the attribute DeepSpeed's engine reads from its
optimizers after a step), and the gradients scaled by `max / (norm + 1e-6)` when above it, as
`clip_grad_norm_` does; DeepSpeed's own clipping is then off (`gradient_clipping: 0`). A
non-finite norm skips the step (`overflow`, which the engine reads to leave its step counter
and schedule alone), as with bf16's `MasterWeightAdamW`. The state dict is torch AdamW's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .master_adamw import CLIP_EPS


class ClippedAdamW(torch.optim.AdamW):
    def __init__(
        self,
        params: Iterable[Tensor],
        *,
        lr: float,
        betas: tuple[float, float],
        weight_decay: float,
        max_grad_norm: float,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, weight_decay=weight_decay, fused=True)
        self.max_grad_norm = max_grad_norm
        self._global_grad_norm: float | None = None
        self.overflow = False

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        if closure is not None:
            raise ValueError("ClippedAdamW.step takes no closure")
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = float(torch.nn.utils.get_total_norm(grads, foreach=True)) if grads else 0.0
        self._global_grad_norm = norm
        self.overflow = not math.isfinite(norm)
        if self.overflow:
            return None
        if self.max_grad_norm > 0 and norm > self.max_grad_norm:
            torch._foreach_mul_(grads, self.max_grad_norm / (norm + CLIP_EPS))
        return super().step()
