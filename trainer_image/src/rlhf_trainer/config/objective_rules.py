"""Rules of the policy objective's choices (`algorithm.policyLoss`, `algorithm.rolloutCorrection`):
which algorithms take them, and the knobs each one does not use. Pure; `rules.job_problems`
runs them with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .algorithm import ITERATIVE_ALGORITHMS, ONLINE_ALGORITHMS, LossAggregation
from .base import Problem
from .objective import PolicyLoss, RolloutCorrectionLevel, RolloutCorrectionMode
from .rollout import RolloutEngine

if TYPE_CHECKING:
    from .job import JobConfig

# The aggregation each ratio loss is defined with (its paper's); ppo takes lossAggregation.
_OWN_AGGREGATION = {
    PolicyLoss.GSPO: LossAggregation.SEQ_MEAN_TOKEN_MEAN,
    PolicyLoss.CISPO: LossAggregation.TOKEN_MEAN,
}
_POLICY_GRADIENT = ", ".join(sorted(a.value for a in ONLINE_ALGORITHMS - ITERATIVE_ALGORITHMS))


def objective_problems(cfg: JobConfig) -> list[Problem]:
    a = cfg.algorithm
    out: list[Problem] = []
    policy_gradient = a.name.is_online and not a.name.is_iterative
    if a.policy_loss is not PolicyLoss.PPO:
        loss = a.policy_loss.value
        if not policy_gradient:
            out.append(
                Problem(
                    "algorithm.policyLoss",
                    f"applies to the policy-gradient algorithms ({_POLICY_GRADIENT}); "
                    f"{a.name.value} does not train on a policy-gradient loss: remove it",
                )
            )
        if a.dual_clip is not None:
            out.append(
                Problem(
                    "algorithm.dualClip",
                    f"caps PPO's clipped surrogate where advantages are negative; policyLoss "
                    f"{loss} has no such term: remove it or use policyLoss ppo",
                )
            )
        own = _OWN_AGGREGATION[a.policy_loss]
        # token-mean is the default: it cannot tell a choice from a manifest's defaults.
        if a.loss_aggregation not in (own, LossAggregation.TOKEN_MEAN):
            out.append(
                Problem(
                    "algorithm.lossAggregation",
                    f"policyLoss {loss} aggregates as its paper does ({own.value}); got "
                    f"{a.loss_aggregation.value}: remove it or use policyLoss ppo",
                )
            )
    correction = a.rollout_correction
    if correction is None:
        return out
    if not policy_gradient:
        out.append(
            Problem(
                "algorithm.rolloutCorrection",
                f"weights a policy-gradient loss ({_POLICY_GRADIENT}); {a.name.value} has "
                "none: remove it",
            )
        )
    if cfg.rollout.engine is RolloutEngine.HF:
        out.append(
            Problem(
                "algorithm.rolloutCorrection",
                "corrects for the vLLM engines' sampling; with rollout.engine hf the actor "
                "samples with its own weights and returns no sampling log-probs: use engine "
                "vllm or remove it",
            )
        )
    mode = correction.mode
    if mode is RolloutCorrectionMode.TIS and correction.lower is not None:
        out.append(
            Problem(
                "algorithm.rolloutCorrection.lower",
                "tis truncates above upper only; lower bounds the kept range of mis and "
                "icepop: remove it or choose one of those modes",
            )
        )
    if mode is RolloutCorrectionMode.ICEPOP and correction.level is RolloutCorrectionLevel.SEQUENCE:
        out.append(
            Problem(
                "algorithm.rolloutCorrection.level",
                "icepop drops single tokens from the loss and its token mean: it is token-level "
                "only; use level token, or mode mis to drop whole sequences",
            )
        )
    return out
