"""The losses the actor and critic ranks minimise, composed from `rlhf_trainer.algos` (pure).

The actor's objective is a policy-gradient loss on the advantages (`algorithm.policyLoss`:
PPO's clipped surrogate, GSPO's sequence-ratio surrogate or CISPO's clipped-weight REINFORCE),
optionally plus a KL loss towards the reference (GRPO style, instead of the KL penalty in the
rewards) and minus an entropy bonus. `seq-mean-token-sum-norm` (Dr. GRPO's aggregation)
divides each response's token sum by a constant, the generation limit `rollout.maxNewTokens`.

With `algorithm.rolloutCorrection`, the batch carries the engine's sampling log-probs
(`rollout_logps`) beside the trainer's (`old_logps`): `rollout_correction`'s weights multiply
each token's policy-gradient loss and its keep mask is the loss' mask (icepop: the dropped
tokens leave the token mean). The KL loss and the entropy bonus keep the response mask.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from rlhf_trainer.algos.kl import kl_estimate
from rlhf_trainer.algos.losses import (
    aggregate_loss,
    cispo_policy_loss,
    gspo_policy_loss,
    ppo_policy_loss,
    value_loss,
)
from rlhf_trainer.algos.masking import masked_mean
from rlhf_trainer.algos.rewards import rollout_correction
from rlhf_trainer.config import JobConfig, LossAggregation, PolicyLoss

# Clamp for the KL loss' log-ratio (keeps k3's exp finite), as OpenRLHF.
KL_LOSS_CLAMP = 10.0


@dataclass(frozen=True)
class CorrectionSettings:
    """`algorithm.rolloutCorrection`, as `rollout_correction` takes it."""

    mode: str
    level: str
    upper: float
    lower: float

    @classmethod
    def from_job(cls, cfg: JobConfig) -> CorrectionSettings | None:
        rc = cfg.algorithm.rollout_correction
        if rc is None:
            return None
        return cls(rc.mode.value, rc.level.value, rc.upper, rc.lower_bound())


@dataclass(frozen=True)
class PolicyLossSettings:
    clip_low: float | None  # None: no lower bound (cispo only)
    clip_high: float
    dual_clip: float | None
    aggregation: str
    norm_length: float | None
    entropy_coef: float
    use_kl_loss: bool
    kl_estimator: str
    loss: str = PolicyLoss.PPO.value
    correction: CorrectionSettings | None = None

    @classmethod
    def from_job(cls, cfg: JobConfig) -> PolicyLossSettings:
        a = cfg.algorithm
        aggregation = a.loss_aggregation
        norm = None
        if aggregation is LossAggregation.SEQ_MEAN_TOKEN_SUM_NORM:
            norm = float(cfg.rollout.max_new_tokens)
        clip_low, clip_high = a.clip_range()
        return cls(
            clip_low=clip_low,
            clip_high=clip_high,
            dual_clip=a.dual_clip,
            aggregation=aggregation.value,
            norm_length=norm,
            entropy_coef=a.entropy_coef,
            use_kl_loss=a.use_kl_loss,
            kl_estimator=a.kl_estimator.value,
            loss=a.policy_loss.value,
            correction=CorrectionSettings.from_job(cfg),
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
    rollout_logp: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Actor loss and detached statistics for one micro-batch; `rollout_logp` is the engine's
    sampling log-probs (needed with `settings.correction`)."""
    weights, keep = None, mask
    if settings.correction is not None:
        if rollout_logp is None:
            raise ValueError(
                "algorithm.rolloutCorrection needs the engine's sampling log-probs "
                "(rollout_logps) in the batch"
            )
        c = settings.correction
        weights, keep, _ = rollout_correction(
            old_logp, rollout_logp, mask, c.mode, c.level, c.upper, c.lower
        )
    loss, stats = policy_gradient_loss(logp, old_logp, advantages, keep, settings, weights)
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


# The step's metrics of the correction (over the whole batch, so min and max are exact).
MISMATCH_PREFIX = "rollout/"
MISMATCH_STATS = (
    "mismatch_kl",
    "rho_mean",
    "rho_min",
    "rho_max",
    "masked_fraction",
    "truncated_fraction",
)


def mismatch_metrics(
    correction: CorrectionSettings, old_logp: Tensor, rollout_logp: Tensor, mask: Tensor
) -> dict[str, float]:
    """`rollout/mismatch_kl` (k3 of KL(engine || trainer) per token), `rollout/rho_mean`,
    `_min`, `_max` (the ratio at the configured level, before truncation),
    `rollout/masked_fraction` and `rollout/truncated_fraction` of the real tokens."""
    c = correction
    _, _, stats = rollout_correction(
        old_logp, rollout_logp, mask, c.mode, c.level, c.upper, c.lower
    )
    return {f"{MISMATCH_PREFIX}{k}": float(stats[k]) for k in MISMATCH_STATS}


def policy_gradient_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    settings: PolicyLossSettings,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """`algorithm.policyLoss` on one micro-batch, each token's loss times `weights`."""
    if settings.loss == PolicyLoss.GSPO.value:
        return gspo_policy_loss(
            logp, old_logp, advantages, mask, _low(settings), settings.clip_high, weights=weights
        )
    if settings.loss == PolicyLoss.CISPO.value:
        return cispo_policy_loss(
            logp, old_logp, advantages, mask, settings.clip_high, settings.clip_low, weights=weights
        )
    return ppo_policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        clip_low=_low(settings),
        clip_high=settings.clip_high,
        dual_clip=settings.dual_clip,
        aggregation=settings.aggregation,
        norm_length=settings.norm_length,
        weights=weights,
    )


def _low(settings: PolicyLossSettings) -> float:
    if settings.clip_low is None:
        raise ValueError(f"policy loss {settings.loss} needs clip_low; only cispo takes none")
    return settings.clip_low


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
