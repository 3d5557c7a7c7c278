"""Training losses: PPO policy and value losses, entropy, SFT, reward model, DPO/IPO/cDPO, KTO.

GSPO and CISPO live in `ratio_losses` (kept apart for length) and are re-exported here.

Per-token losses come as `[B, T]` with an action mask and are reduced by `aggregate_loss`;
preference losses work on `[B]` sequence log-probs (sums over the response tokens, see
`sequence_logps`). Statistics are returned as detached tensors, never `.item()`-ed here.
"""

from __future__ import annotations

from typing import Final

import torch
import torch.nn.functional as F
from torch import Tensor

from ._validation import (
    require_choice,
    require_float_tensor,
    require_mask,
    require_ndim,
    require_number_in,
    require_same_shape,
    require_tensor,
)
from .kl import MAX_LOG_RATIO
from .masking import masked_count, masked_mean, masked_sum, token_weighted
from .ratio_losses import cispo_policy_loss as cispo_policy_loss
from .ratio_losses import gspo_policy_loss as gspo_policy_loss

AGGREGATIONS: Final = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
DPO_KINDS: Final = ("dpo", "ipo")


def _real(mask: Tensor) -> Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def aggregate_loss(
    loss_mat: Tensor, mask: Tensor, aggregation: str, *, norm_length: float | None = None
) -> Tensor:
    """Reduce a `[B, T]` per-token loss to a scalar over the real tokens.

    - `"token-mean"`: mean over all real tokens of the batch (every token weighs the same;
      DAPO, Yu et al. 2025, argues for it with long responses).
    - `"seq-mean-token-mean"`: mean over each sequence, then over sequences (GRPO as written
      by Shao et al. 2024).
    - `"seq-mean-token-sum"`: sum over each sequence, then mean over sequences.
    - `"seq-mean-token-sum-norm"`: sum over each sequence divided by the constant
      `norm_length` (default T), then mean over sequences — Dr. GRPO (Liu et al. 2025), which
      removes the response-length bias; keep `norm_length` fixed (e.g. the max new tokens).

    Sequences without any real token are left out of the sequence means.
    """
    require_float_tensor("loss_mat", loss_mat)
    require_ndim("loss_mat", loss_mat, 2, "[B, T]")
    require_mask("mask", mask, loss_mat.shape)
    require_choice("aggregation", aggregation, AGGREGATIONS)
    if norm_length is not None:
        require_number_in("norm_length", norm_length, low=0.0, low_open=True)
    real = _real(mask)
    if aggregation == "token-mean":
        return masked_mean(loss_mat, real)

    if aggregation == "seq-mean-token-mean":
        per_sequence = masked_mean(loss_mat, real, dim=-1)
    elif aggregation == "seq-mean-token-sum":
        per_sequence = masked_sum(loss_mat, real, dim=-1)
    else:
        length = loss_mat.shape[-1] if norm_length is None else norm_length
        per_sequence = masked_sum(loss_mat, real, dim=-1) / length
    has_tokens = masked_count(real, dim=-1) > 0
    return masked_mean(per_sequence, has_tokens)


def ppo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    aggregation: str = "token-mean",
    *,
    norm_length: float | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017), with optional dual clip (Ye et al. 2020).

    With `ratio = exp(logp - old_logp)` and advantage A, per token
    `L = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))`; asymmetric bounds are
    DAPO's clip-higher (Yu et al. 2025). Dual clip (`dual_clip = c > 1`) additionally caps the
    loss at `-c * A` where A < 0, so a huge ratio on a bad action cannot dominate. The log-ratio
    is clamped to +-20 before exp. `old_logp` and `advantages` are constants: no gradient
    reaches them. `weights` (`[B, T]`, detached; e.g. `rollout_correction`'s) multiply each
    token's loss before aggregation.

    Returns `(loss, stats)` with stats `clip_frac` (tokens where the clipped term was the
    larger, i.e. the gradient was cut), `dual_clip_frac`, `approx_kl` (mean of
    `old_logp - logp`, k1 of the old policy vs the new) and `ratio_mean`, all detached.
    """
    require_float_tensor("logp", logp)
    require_ndim("logp", logp, 2, "[B, T]")
    require_float_tensor("old_logp", old_logp)
    require_float_tensor("advantages", advantages)
    require_same_shape("logp", logp, old_logp=old_logp, advantages=advantages)
    real = _real(require_mask("mask", mask, logp.shape))
    require_number_in("clip_low", clip_low, low=0.0, high=1.0, high_open=True)
    require_number_in("clip_high", clip_high, low=0.0)
    if dual_clip is not None:
        require_number_in("dual_clip", dual_clip, low=1.0, low_open=True)

    advantages = advantages.detach()
    # Select before exp: padding log-probs may be -inf.
    log_ratio = torch.where(real, logp - old_logp.detach(), 0.0)
    ratio = torch.exp(log_ratio.clamp(min=-MAX_LOG_RATIO, max=MAX_LOG_RATIO))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(min=1.0 - clip_low, max=1.0 + clip_high)
    loss_mat = torch.maximum(unclipped, clipped)
    dual_clipped = torch.zeros_like(real)
    if dual_clip is not None:
        cap = -advantages * dual_clip
        dual_clipped = (advantages < 0) & (loss_mat > cap)
        loss_mat = torch.where(dual_clipped, cap, loss_mat)
    loss_mat = token_weighted(loss_mat, weights, real)

    loss = aggregate_loss(loss_mat, real, aggregation, norm_length=norm_length)
    with torch.no_grad():
        stats = {
            "clip_frac": masked_mean((clipped > unclipped).to(logp.dtype), real),
            "dual_clip_frac": masked_mean(dual_clipped.to(logp.dtype), real),
            "approx_kl": masked_mean(-log_ratio, real),
            "ratio_mean": masked_mean(ratio, real),
        }
    return loss, stats


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip: float | None = None,
    aggregation: str = "token-mean",
    *,
    norm_length: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Critic regression loss `0.5 * (V - R)^2`, clipped as in PPO when `clip` is given.

    Clipped (Schulman et al. 2017's baselines implementation; Andrychowicz et al. 2021 discuss
    it): `V_clip = old_V + clamp(V - old_V, -clip, clip)` and the loss is
    `0.5 * max((V - R)^2, (V_clip - R)^2)`. `old_values` and `returns` are constants.

    Returns `(loss, stats)` with `clip_frac` (tokens where the clipped error was the larger)
    and `values_mean`, detached.
    """
    require_float_tensor("values", values)
    require_ndim("values", values, 2, "[B, T]")
    require_float_tensor("old_values", old_values)
    require_float_tensor("returns", returns)
    require_same_shape("values", values, old_values=old_values, returns=returns)
    real = _real(require_mask("mask", mask, values.shape))
    if clip is not None:
        require_number_in("clip", clip, low=0.0, low_open=True)

    old_values, returns = old_values.detach(), returns.detach()
    error = torch.where(real, values - returns, 0.0)
    loss_mat = 0.5 * error**2
    clipped_more = torch.zeros_like(real)
    if clip is not None:
        clipped_values = old_values + (values - old_values).clamp(min=-clip, max=clip)
        clipped_error = torch.where(real, clipped_values - returns, 0.0)
        clipped_loss = 0.5 * clipped_error**2
        clipped_more = clipped_loss > loss_mat
        loss_mat = torch.maximum(loss_mat, clipped_loss)

    loss = aggregate_loss(loss_mat, real, aggregation, norm_length=norm_length)
    with torch.no_grad():
        stats = {
            "clip_frac": masked_mean(clipped_more.to(values.dtype), real),
            "values_mean": masked_mean(values, real),
        }
    return loss, stats


def _float_logits(logits: Tensor) -> Tensor:
    # Half-precision softmax loses too much; compute in at least float32.
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def entropy_from_logits(logits: Tensor, mask: Tensor) -> Tensor:
    """Per-token entropy `H = logsumexp(z) - sum_v softmax(z)_v z_v` of `[B, T, V]` logits.

    Returns `[B, T]` (float32 at least), 0 on padding; reduce it with `aggregate_loss` (e.g. for
    an entropy bonus) or `masking.masked_mean` (for a statistic).
    """
    require_float_tensor("logits", logits)
    require_ndim("logits", logits, 3, "[B, T, V]")
    real = _real(require_mask("mask", mask, logits.shape[:2]))
    logits = _float_logits(logits)
    probs = torch.softmax(logits, dim=-1)
    entropy = torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)
    return torch.where(real, entropy, 0.0)


def _require_labels(labels: Tensor, logits: Tensor) -> None:
    require_tensor("labels", labels)
    if labels.shape != logits.shape[:2] or labels.is_floating_point():
        raise ValueError(
            f"labels must be an integer tensor of shape {tuple(logits.shape[:2])} (logits' "
            f"[B, T]), got {labels.dtype} of shape {tuple(labels.shape)}"
        )


def log_probs_from_logits(logits: Tensor, labels: Tensor) -> Tensor:
    """Log-probability of each label under `[B, T, V]` logits: `[B, T]` (float32 at least).

    Logits and labels must already be aligned (logits at position t score labels[:, t]; shift
    a causal LM's outputs by one before calling).
    """
    require_float_tensor("logits", logits)
    require_ndim("logits", logits, 3, "[B, T, V]")
    _require_labels(labels, logits)
    logits = _float_logits(logits)
    # Padding labels may be negative (-100): gather at 0 there; the caller masks them out.
    index = labels.clamp(min=0).long().unsqueeze(-1)
    picked = logits.gather(-1, index).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def log_probs_and_entropy(
    logits: Tensor, labels: Tensor, mask: Tensor, *, entropy_grad: bool = False
) -> tuple[Tensor, Tensor]:
    """`log_probs_from_logits` and `entropy_from_logits` from one log-softmax of `[B, T, V]`
    logits: `H = -sum_v p_v log p_v` with `log p` the same tensor the labels are read from.
    The entropy has a gradient only with `entropy_grad` (a bonus; else it is a statistic).

    One fused log-softmax where the two functions take a logsumexp each and a softmax: the
    actor's update at size L (32 x 64 response tokens, 4,096-word vocabulary, 2 cores), log-probs
    with their backward and the entropy, 120-123 -> 72-81 ms.
    """
    require_float_tensor("logits", logits)
    require_ndim("logits", logits, 3, "[B, T, V]")
    real = _real(require_mask("mask", mask, logits.shape[:2]))
    _require_labels(labels, logits)
    log_p = torch.log_softmax(_float_logits(logits), dim=-1)
    index = labels.clamp(min=0).long().unsqueeze(-1)  # padding labels may be negative
    token_logps = log_p.gather(-1, index).squeeze(-1)
    source = log_p if entropy_grad else log_p.detach()
    entropy = -(source.exp() * source).sum(dim=-1)
    return token_logps, torch.where(real, entropy, 0.0)


def sequence_logps(token_logps: Tensor, mask: Tensor, average: bool = False) -> Tensor:
    """Sum (or, with `average=True`, mean) of `[B, T]` token log-probs over real tokens: `[B]`.

    DPO and KTO use the sum; IPO is commonly run on the mean (TRL does, following Azar et al.).
    """
    require_float_tensor("token_logps", token_logps)
    require_ndim("token_logps", token_logps, 2, "[B, T]")
    reduce = masked_mean if average else masked_sum
    return reduce(token_logps, mask, dim=-1)


def sft_loss(
    logits: Tensor, labels: Tensor, mask: Tensor, aggregation: str = "token-mean"
) -> Tensor:
    """Negative log-likelihood of `labels` under aligned `[B, T, V]` logits, over real tokens.

    The maximum-likelihood objective of supervised fine-tuning (Ouyang et al. 2022, step 1),
    by default the mean over all real tokens.
    """
    token_logps = log_probs_from_logits(logits, labels)
    require_mask("mask", mask, token_logps.shape)
    return aggregate_loss(-token_logps, mask, aggregation)


def pairwise_rm_loss(
    chosen: Tensor, rejected: Tensor, margin: Tensor | float | None = None
) -> Tensor:
    """Reward-model loss `mean(-log sigmoid(r_w - r_l - margin))` over `[B]` pairs.

    The Bradley-Terry objective of Stiennon et al. 2020 and Ouyang et al. 2022; the optional
    margin (scalar or `[B]`) is Llama 2's (Touvron et al. 2023).
    """
    require_float_tensor("chosen", chosen)
    require_ndim("chosen", chosen, 1, "[B]")
    require_float_tensor("rejected", rejected)
    require_same_shape("chosen", chosen, rejected=rejected)
    difference = chosen - rejected
    if margin is not None:
        if isinstance(margin, Tensor) and margin.shape not in (torch.Size([]), chosen.shape):
            raise ValueError(
                f"margin must be a number, a scalar tensor or shaped like chosen "
                f"{tuple(chosen.shape)}, got shape {tuple(margin.shape)}"
            )
        difference = difference - margin
    return -F.logsigmoid(difference).mean()


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    beta: float,
    kind: str = "dpo",
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Direct preference losses on `[B]` sequence log-probs; returns per-pair losses.

    With `h = (policy_chosen - policy_rejected) - (ref_chosen - ref_rejected)`:

    - `"dpo"` (Rafailov et al. 2023): `-log sigmoid(beta * h)`; with `label_smoothing = e > 0`
      it is conservative DPO (Mitchell 2023, "A note on DPO with noisy preferences"):
      `-(1 - e) log sigmoid(beta * h) - e log sigmoid(-beta * h)`.
    - `"ipo"` (Azar et al. 2023, "A General Theoretical Paradigm..."): `(h - 1 / (2 beta))^2`.

    Returns `(losses, chosen_rewards, rejected_rewards)`, each `[B]`; the implicit rewards
    `beta * (policy - ref)` are detached. Reference log-probs never receive gradient.
    """
    tensors = {
        "policy_chosen": policy_chosen,
        "policy_rejected": policy_rejected,
        "ref_chosen": ref_chosen,
        "ref_rejected": ref_rejected,
    }
    for name, tensor in tensors.items():
        require_float_tensor(name, tensor)
    require_ndim("policy_chosen", policy_chosen, 1, "[B]")
    require_same_shape(
        "policy_chosen",
        policy_chosen,
        policy_rejected=policy_rejected,
        ref_chosen=ref_chosen,
        ref_rejected=ref_rejected,
    )
    require_number_in("beta", beta, low=0.0, low_open=True)
    require_choice("kind", kind, DPO_KINDS)
    require_number_in("label_smoothing", label_smoothing, low=0.0, high=0.5, high_open=True)
    if kind == "ipo" and label_smoothing != 0.0:
        raise ValueError(
            f"label_smoothing applies to kind='dpo' (conservative DPO) only; got "
            f"{label_smoothing!r} with kind='ipo'"
        )

    ref_chosen, ref_rejected = ref_chosen.detach(), ref_rejected.detach()
    h = (policy_chosen - policy_rejected) - (ref_chosen - ref_rejected)
    if kind == "dpo":
        losses = -(1.0 - label_smoothing) * F.logsigmoid(beta * h)
        if label_smoothing > 0.0:
            losses = losses - label_smoothing * F.logsigmoid(-beta * h)
    else:
        losses = (h - 1.0 / (2.0 * beta)) ** 2
    chosen_rewards = (beta * (policy_chosen - ref_chosen)).detach()
    rejected_rewards = (beta * (policy_rejected - ref_rejected)).detach()
    return losses, chosen_rewards, rejected_rewards


def kto_loss(
    policy_logps: Tensor,
    ref_logps: Tensor,
    desirable_mask: Tensor,
    kl_estimate: Tensor | float,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Kahneman-Tversky Optimisation loss (Ethayarajh et al. 2024) on `[B]` sequence log-probs.

    With the implied reward `r = policy_logps - ref_logps` and reference point
    `z0 = max(0, kl_estimate)` (the batch estimate of KL(policy || ref), typically from
    mismatched prompt/completion pairs, treated as a constant):
    desirable examples lose `desirable_weight * (1 - sigmoid(beta * (r - z0)))`, undesirable
    ones `undesirable_weight * (1 - sigmoid(beta * (z0 - r)))`.

    Returns `(losses, rewards)`, each `[B]`: per-example losses and the detached implicit
    rewards `beta * r`.
    """
    require_float_tensor("policy_logps", policy_logps)
    require_ndim("policy_logps", policy_logps, 1, "[B]")
    require_float_tensor("ref_logps", ref_logps)
    require_same_shape("policy_logps", policy_logps, ref_logps=ref_logps)
    require_mask("desirable_mask", desirable_mask, policy_logps.shape)
    require_number_in("beta", beta, low=0.0, low_open=True)
    require_number_in("desirable_weight", desirable_weight, low=0.0)
    require_number_in("undesirable_weight", undesirable_weight, low=0.0)
    if isinstance(kl_estimate, Tensor):
        if kl_estimate.numel() != 1:
            raise ValueError(
                f"kl_estimate must be a single number (the batch KL estimate), got shape "
                f"{tuple(kl_estimate.shape)}"
            )
        z0 = kl_estimate.detach().reshape(()).to(policy_logps.dtype).clamp(min=0.0)
    else:
        require_number_in("kl_estimate", kl_estimate)
        z0 = policy_logps.new_tensor(max(float(kl_estimate), 0.0))

    implied = policy_logps - ref_logps.detach()
    desirable = _real(desirable_mask)
    losses = torch.where(
        desirable,
        desirable_weight * (1.0 - torch.sigmoid(beta * (implied - z0))),
        undesirable_weight * (1.0 - torch.sigmoid(beta * (z0 - implied))),
    )
    return losses, (beta * implied).detach()
