"""Policy losses that use the importance ratio differently from PPO's per-token clip.

- `gspo_policy_loss`: GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization", the
  objective behind Qwen3's MoE RL): one length-normalised ratio per sequence, clipped per
  sequence.
- `cispo_policy_loss`: CISPO (MiniMax 2025, "MiniMax-M1"): REINFORCE weighted by the clipped,
  detached token ratio, so clipped tokens still get a gradient.

`rlhf_trainer.algos.losses` re-exports both; the conventions are those of the package.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._validation import (
    require_float_tensor,
    require_mask,
    require_ndim,
    require_number_in,
    require_same_shape,
)
from .kl import MAX_LOG_RATIO
from .masking import masked_count, masked_mean, token_weighted


def _checked_inputs(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """Validate, and return the bool mask and `[B, T]` detached advantages."""
    require_float_tensor("logp", logp)
    require_ndim("logp", logp, 2, "[B, T]")
    require_float_tensor("old_logp", old_logp)
    require_same_shape("logp", logp, old_logp=old_logp)
    require_float_tensor("advantages", advantages)
    if advantages.dim() == 1 and advantages.shape[0] == logp.shape[0]:
        advantages = advantages[:, None].expand_as(logp)
    elif advantages.shape != logp.shape:
        raise ValueError(
            f"advantages must be [B] (one per sequence) or [B, T] like logp "
            f"{tuple(logp.shape)}, got {tuple(advantages.shape)}"
        )
    real = require_mask("mask", mask, logp.shape)
    real = real if real.dtype == torch.bool else real != 0
    return real, torch.where(real, advantages.detach(), 0.0)


def gspo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    *,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO's sequence-level clipped surrogate.

    The sequence ratio `s_i = exp(mean_t (logp - old_logp))` over the sequence's real tokens is
    clipped to `[1 - clip_low, 1 + clip_high]` (the paper's 3e-4 / 4e-4: the ratio is a
    geometric mean, far closer to 1 than a token's) against the sequence's advantage `A_i`,
    and the loss is the mean over sequences of `-min(s_i A_i, clip(s_i) A_i)`.

    It is computed in GSPO-token form (the paper's eq. 13, as verl does): token t carries
    `s_i,t = sg(s_i) * exp(logp_t - sg(logp_t))` and its own advantage, and the per-token
    losses are averaged per sequence, then over sequences. With one advantage per sequence
    (`[B]`, or `[B, T]` constant along the sequence, as the group estimators give) value and
    gradient equal the sequence form's; per-token advantages are GSPO-token proper.
    `weights` (`[B, T]`, detached; e.g. `rollout_correction`'s) multiply each token's loss
    before the per-sequence mean.

    Returns `(loss, stats)`: `clip_frac` (sequences whose clipped term won, so got no
    gradient), `seq_ratio_mean`, `approx_kl` (token mean of `old_logp - logp`), detached.
    Sequences without a real token are left out.
    """
    real, advantages = _checked_inputs(logp, old_logp, advantages, mask)
    require_number_in("clip_low", clip_low, low=0.0, high=1.0, high_open=True)
    require_number_in("clip_high", clip_high, low=0.0)

    # Select before exp: padding log-probs may be -inf.
    log_ratio = torch.where(real, logp - old_logp.detach(), 0.0)
    log_seq_ratio = masked_mean(log_ratio, real, dim=-1, keepdim=True)
    safe_logp = torch.where(real, logp, 0.0)
    token_log_ratio = log_seq_ratio.detach() + safe_logp - safe_logp.detach()
    ratio = token_log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(min=1.0 - clip_low, max=1.0 + clip_high)
    loss_mat = token_weighted(torch.maximum(unclipped, clipped), weights, real)

    has_tokens = masked_count(real, dim=-1) > 0
    loss = masked_mean(masked_mean(loss_mat, real, dim=-1), has_tokens)
    with torch.no_grad():
        # Per sequence, the terms are the same on every token (with one advantage per
        # sequence); a sequence counts as clipped where any of its tokens was.
        clipped_tokens = real & (clipped > unclipped)
        seq_clipped = clipped_tokens.any(dim=-1).to(logp.dtype)
        stats = {
            "clip_frac": masked_mean(seq_clipped, has_tokens),
            "seq_ratio_mean": masked_mean(log_seq_ratio.squeeze(-1).exp(), has_tokens),
            "approx_kl": masked_mean(-log_ratio, real),
        }
    return loss, stats


def cispo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_high: float,
    clip_low: float | None = None,
    *,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO: `-sum_t sg(clip(r_t)) A_t logp_t / sum(mask)` over the batch's real tokens.

    `r_t = exp(logp_t - old_logp_t)` is clipped to `[1 - clip_low, 1 + clip_high]` and
    detached, so unlike PPO no token loses its gradient: a clipped token's update is only
    scaled down. MiniMax-M1 sets no lower bound (`clip_low=None`) and tunes `clip_high`.
    `weights` (`[B, T]`, detached; e.g. `rollout_correction`'s) multiply each token's loss.

    Returns `(loss, stats)`: `clip_frac` (real tokens whose ratio was clipped), `ratio_mean`
    and `approx_kl` (token mean of `old_logp - logp`), detached.
    """
    real, advantages = _checked_inputs(logp, old_logp, advantages, mask)
    require_number_in("clip_high", clip_high, low=0.0)
    if clip_low is not None:
        require_number_in("clip_low", clip_low, low=0.0, high=1.0, high_open=True)

    log_ratio = torch.where(real, logp - old_logp.detach(), 0.0)
    with torch.no_grad():
        ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
        low = None if clip_low is None else 1.0 - clip_low
        weight = ratio.clamp(min=low, max=1.0 + clip_high)
    loss_mat = -weight * advantages * torch.where(real, logp, 0.0)
    loss = masked_mean(token_weighted(loss_mat, weights, real), real)
    with torch.no_grad():
        stats = {
            "clip_frac": masked_mean((real & (weight != ratio)).to(logp.dtype), real),
            "ratio_mean": masked_mean(ratio, real),
            "approx_kl": masked_mean(-log_ratio, real),
        }
    return loss, stats
