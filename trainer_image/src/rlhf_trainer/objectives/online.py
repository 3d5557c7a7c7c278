"""The losses the actor and critic ranks minimise, composed from `rlhf_trainer.algos` (pure).

The actor's objective is PPO's clipped surrogate on the advantages, optionally plus a KL loss
towards the reference (GRPO style, instead of the KL penalty in the rewards) and minus an
entropy bonus. `seq-mean-token-sum-norm` (Dr. GRPO's aggregation) divides each response's
token sum by a constant, the generation limit `rollout.maxNewTokens`.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from rlhf_trainer.algos.kl import kl_estimate
from rlhf_trainer.algos.losses import aggregate_loss, ppo_policy_loss, value_loss
from rlhf_trainer.algos.masking import masked_mean
from rlhf_trainer.config import JobConfig, LossAggregation

# Clamp for the KL loss' log-ratio (keeps k3's exp finite), as OpenRLHF.
KL_LOSS_CLAMP = 10.0


@dataclass(frozen=True)
class PolicyLossSettings:
    clip_low: float
    clip_high: float
    dual_clip: float | None
    aggregation: str
    norm_length: float | None
    entropy_coef: float
    use_kl_loss: bool
    kl_estimator: str

    @classmethod
    def from_job(cls, cfg: JobConfig) -> PolicyLossSettings:
        a = cfg.algorithm
        aggregation = a.loss_aggregation
        norm = None
        if aggregation is LossAggregation.SEQ_MEAN_TOKEN_SUM_NORM:
            norm = float(cfg.rollout.max_new_tokens)
        return cls(
            clip_low=a.clip_low,
            clip_high=a.clip_high,
            dual_clip=a.dual_clip,
            aggregation=aggregation.value,
            norm_length=norm,
            entropy_coef=a.entropy_coef,
            use_kl_loss=a.use_kl_loss,
            kl_estimator=a.kl_estimator.value,
        )


def policy_objective(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    settings: PolicyLossSettings,
    *,
    kl_coef: float,
    ref_logp: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Actor loss and detached statistics for one micro-batch."""
    loss, stats = ppo_policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        clip_low=settings.clip_low,
        clip_high=settings.clip_high,
        dual_clip=settings.dual_clip,
        aggregation=settings.aggregation,
        norm_length=settings.norm_length,
    )
    stats = {"policy_loss": loss.detach(), **stats}
    if settings.use_kl_loss and kl_coef > 0:
        if ref_logp is None:
            raise ValueError("algorithm.useKlLoss needs the reference log-probs in the batch")
        kl = kl_estimate(logp, ref_logp, settings.kl_estimator, clamp=KL_LOSS_CLAMP, mask=mask)
        kl_loss = aggregate_loss(kl, mask, settings.aggregation, norm_length=settings.norm_length)
        loss = loss + kl_coef * kl_loss
        stats["kl_loss"] = kl_loss.detach()
    if entropy is not None:
        mean_entropy = aggregate_loss(
            entropy, mask, settings.aggregation, norm_length=settings.norm_length
        )
        if settings.entropy_coef > 0:
            loss = loss - settings.entropy_coef * mean_entropy
        stats["entropy"] = masked_mean(entropy.detach(), mask)
    return loss, stats


def critic_objective(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float | None,
    aggregation: str = "token-mean",
) -> tuple[Tensor, dict[str, Tensor]]:
    """Critic loss (PPO value clipping when `clip` is set) and detached statistics."""
    loss, stats = value_loss(values, old_values, returns, mask, clip=clip, aggregation=aggregation)
    return loss, {"value_loss": loss.detach(), **{f"value_{k}": v for k, v in stats.items()}}
