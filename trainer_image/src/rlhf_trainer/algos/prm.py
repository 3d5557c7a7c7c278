"""Process reward model (PRM) objective and step-score aggregation (pure torch).

A PRM is a causal LM read at each step's separator token: the logit margin
`z = logit(positive) - logit(negative)` there is the step's log-odds of being good (a softmax
over the two label tokens, as OpenRLHF's PRM trainer restricts it), so the loss is binary
cross-entropy on `z` at the step positions only, and a step's score is `sigmoid(z)`.

Step tensors are `[B, T]`: `labels` holds 1 (good step), 0 (bad step) or -1 (no step here);
`mask` marks step positions.
"""

from __future__ import annotations

from typing import Final

import torch
import torch.nn.functional as F
from torch import Tensor

from ._validation import require_choice, require_float_tensor, require_ndim, require_tensor
from .masking import masked_mean

NO_STEP: Final = -1
AGGREGATIONS: Final = ("min", "last", "mean")


def step_margins(logits: Tensor, positive: int, negative: int) -> Tensor:
    """`[B, T]` log-odds of a good step, `logit(positive) - logit(negative)`, from `[B, T, V]`."""
    require_float_tensor("logits", logits)
    require_ndim("logits", logits, 3, "[B, T, V]")
    logits = logits.float()
    return logits[..., positive] - logits[..., negative]


def prm_loss(margins: Tensor, labels: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Mean binary cross-entropy of the step log-odds against the step labels, over the step
    positions only (`labels >= 0`); stats `accuracy` (share of steps judged right: z > 0 for
    good steps, z <= 0 for bad ones) and `good_score` / `bad_score` (mean sigmoid(z))."""
    require_float_tensor("margins", margins)
    require_ndim("margins", margins, 2, "[B, T]")
    require_tensor("labels", labels)
    if labels.shape != margins.shape or labels.is_floating_point():
        raise ValueError(
            f"labels must be an integer tensor shaped like margins {tuple(margins.shape)} "
            f"(1 good, 0 bad, -1 no step); got {labels.dtype} {tuple(labels.shape)}"
        )
    steps = labels >= 0
    if not bool(steps.any()):
        raise ValueError("a PRM batch needs at least one labelled step")
    good = labels == 1
    target = good.to(margins.dtype)
    per_position = F.binary_cross_entropy_with_logits(margins, target, reduction="none")
    loss = masked_mean(torch.where(steps, per_position, 0.0), steps)
    with torch.no_grad():
        right = (margins > 0) == good
        scores = torch.sigmoid(margins)
        stats = {
            "accuracy": masked_mean(right.to(margins.dtype), steps),
            "good_score": masked_mean(scores, steps & good),
            "bad_score": masked_mean(scores, steps & ~good),
        }
    return loss, stats


def aggregate_step_scores(scores: Tensor, mask: Tensor, how: str) -> Tensor:
    """`[B]` response rewards from `[B, T]` step scores at the `mask`ed step positions: the
    weakest step (`min`), the final step (`last`) or the `mean`. A response with no step
    scores 0."""
    require_float_tensor("scores", scores)
    require_ndim("scores", scores, 2, "[B, T]")
    require_choice("how", how, AGGREGATIONS)
    steps = mask.bool()
    has = steps.any(dim=-1)
    if how == "min":
        out = torch.where(steps, scores, torch.inf).min(dim=-1).values
    elif how == "mean":
        out = masked_mean(scores, steps, dim=-1)
    else:
        index = torch.arange(scores.shape[-1], device=scores.device)
        last = torch.where(steps, index, -1).max(dim=-1).values.clamp(min=0)
        out = scores.gather(-1, last.unsqueeze(-1)).squeeze(-1)
    return torch.where(has, out, 0.0)
