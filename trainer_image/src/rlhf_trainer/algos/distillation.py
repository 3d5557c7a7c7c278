"""Token-level knowledge distillation losses (Hinton et al. 2015; Gu et al. 2024 for the reverse
KL): the student matches the teacher's whole next-token distribution at every response token.

Both distributions come as `[B, T, V]` (the student's logits, the teacher's log-probs, aligned:
position t predicts token t + 1) with a `[B, T]` mask of the trained tokens.
"""

from __future__ import annotations

from typing import Final

import torch
from torch import Tensor

from ._validation import (
    require_choice,
    require_float_tensor,
    require_mask,
    require_ndim,
    require_number_in,
)
from .masking import masked_mean

DISTILL_KINDS: Final = ("forward-kl", "reverse-kl", "mixed")


def token_kls(student_logps: Tensor, teacher_logps: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token `KL(teacher || student)` and `KL(student || teacher)`, each `[B, T]`, from
    `[B, T, V]` log-probs (exact sums over the vocabulary, not sampled estimates)."""
    forward = (teacher_logps.exp() * (teacher_logps - student_logps)).sum(dim=-1)
    reverse = (student_logps.exp() * (student_logps - teacher_logps)).sum(dim=-1)
    return forward, reverse


def distillation_loss(
    student_logits: Tensor,
    teacher_logps: Tensor,
    mask: Tensor,
    kind: str = "forward-kl",
    mix: float = 0.5,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Mean over the real tokens of the chosen divergence between teacher and student.

    - `"forward-kl"`: `KL(teacher || student)`, what cross-entropy on soft labels minimises
      (mean-seeking: the student spreads over every mode of the teacher).
    - `"reverse-kl"`: `KL(student || teacher)` (mode-seeking; MiniLLM).
    - `"mixed"`: `(1 - mix) * forward + mix * reverse`.

    The teacher is a constant (no gradient). Returns `(loss, stats)` with both KLs' means,
    detached: `forward_kl` is the "KL to the teacher" a run should drive down.
    """
    require_float_tensor("student_logits", student_logits)
    require_ndim("student_logits", student_logits, 3, "[B, T, V]")
    require_float_tensor("teacher_logps", teacher_logps)
    if teacher_logps.shape != student_logits.shape:
        raise ValueError(
            f"teacher_logps must be shaped like student_logits {tuple(student_logits.shape)}; "
            f"got {tuple(teacher_logps.shape)} (teacher and student need the same vocabulary)"
        )
    real = require_mask("mask", mask, student_logits.shape[:2])
    real = real if real.dtype == torch.bool else real != 0
    require_choice("kind", kind, DISTILL_KINDS)
    require_number_in("mix", mix, low=0.0, high=1.0)

    student = torch.log_softmax(student_logits.float(), dim=-1)
    teacher = teacher_logps.detach().float()
    forward, reverse = token_kls(student, teacher)
    if kind == "forward-kl":
        per_token = forward
    elif kind == "reverse-kl":
        per_token = reverse
    else:
        per_token = (1.0 - mix) * forward + mix * reverse
    loss = masked_mean(torch.where(real, per_token, 0.0), real)
    with torch.no_grad():
        stats = {"forward_kl": masked_mean(forward, real), "reverse_kl": masked_mean(reverse, real)}
    return loss, stats
