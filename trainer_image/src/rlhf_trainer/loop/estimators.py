"""From sequence scores to advantages and returns, for every online algorithm (pure).

Every formula is `rlhf_trainer.algos`; this module only composes them as each algorithm
prescribes (following OpenRLHF's implementation of the papers):

| algorithm            | baseline                     | KL in reward | whitening (global)      |
|----------------------|------------------------------|--------------|-------------------------|
| ppo                  | critic, GAE(gamma, lambda)   | yes          | if whitenAdvantages     |
| reinforce++          | none: discounted returns     | yes          | if whitenAdvantages     |
| reinforce++-baseline | group mean, then as above    | yes          | if whitenAdvantages     |
| grpo                 | group mean / std             | yes          | no (group-normalised)   |
| dr-grpo              | group mean                   | yes          | no                      |
| rloo                 | leave-one-out group mean     | yes          | no                      |
| on-policy-distillation | none: per-token -(logp - logp_teacher), no discount | no | no  |

"KL in reward" is the per-token penalty `-klCoef * KL` (reward on the EOS token, InstructGPT);
with `useKlLoss` the KL moves into the actor's loss instead and the reward carries only the
score. The driver holds the whole step's batch, so "global" whitening really is over all
samples of the step, whatever the number of data-parallel ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlhf_trainer.algos.advantages import discounted_returns, gae, group_advantages, whiten
from rlhf_trainer.algos.kl import kl_estimate
from rlhf_trainer.algos.masking import masked_mean
from rlhf_trainer.algos.rewards import RunningMeanStd, clip_rewards, shape_token_rewards
from rlhf_trainer.config import AlgorithmConfig, AlgorithmName

from .distill import reverse_kl_tokens

GROUP_METHOD = {
    AlgorithmName.GRPO: "grpo",
    AlgorithmName.DR_GRPO: "dr_grpo",
    AlgorithmName.RLOO: "rloo",
    AlgorithmName.REINFORCE_PP_BASELINE: "reinforce_baseline",
}


@dataclass(frozen=True)
class Advantages:
    advantages: Tensor  # [B, R]
    returns: Tensor  # [B, R]: the critic's targets (PPO); the discounted returns otherwise
    token_rewards: Tensor  # [B, R]
    kl: Tensor  # [B, R] per-token KL estimate to the reference (0 without a reference)


def process_scores(
    scores: Tensor, algo: AlgorithmConfig, normalizer: RunningMeanStd | None
) -> Tensor:
    """Clip (`rewardClip`), then normalise with running statistics (`normalizeReward`)."""
    if algo.reward_clip is not None:
        scores = clip_rewards(scores, algo.reward_clip)
    if algo.normalize_reward and normalizer is not None:
        normalizer.update(scores)
        scores = normalizer.normalize(scores).to(scores.dtype)
    return scores


def token_kl(
    old_logp: Tensor, ref_logp: Tensor | None, mask: Tensor, algo: AlgorithmConfig
) -> Tensor:
    if ref_logp is None:
        return torch.zeros_like(old_logp)
    return kl_estimate(old_logp, ref_logp, algo.kl_estimator.value, mask=mask)


def compute_advantages(
    algo: AlgorithmConfig,
    scores: Tensor,
    mask: Tensor,
    *,
    old_logp: Tensor,
    ref_logp: Tensor | None,
    values: Tensor | None,
    kl_coef: float,
    group_size: int,
    teacher_logp: Tensor | None = None,
) -> Advantages:
    """Advantages and returns of one step's batch (`scores` `[B]`, per-token `[B, R]`;
    `teacher_logp`: on-policy distillation's teacher, whose log-probs are the reward)."""
    name = algo.name
    real = mask != 0
    if name is AlgorithmName.ON_POLICY_DISTILLATION:
        if teacher_logp is None:
            raise ValueError("algorithm on-policy-distillation needs the teacher's log-probs")
        # Each token's own reward (Thinking Machines' discount 0), unwhitened: see `distill`.
        rewards = -reverse_kl_tokens(old_logp, teacher_logp, real)
        return Advantages(rewards, rewards, rewards, torch.zeros_like(rewards))
    kl = token_kl(old_logp, ref_logp, mask, algo)
    penalty = 0.0 if algo.use_kl_loss else kl_coef
    if name is AlgorithmName.PPO:
        if values is None:
            raise ValueError("algorithm ppo needs the critic's values")
        rewards = shape_token_rewards(scores, kl, real, penalty)
        advantages, returns = gae(rewards, values.float(), real, algo.gamma, algo.lambd)
        if algo.whiten_advantages:
            advantages = whiten(advantages, real)
        return Advantages(advantages, returns, rewards, kl)

    if name in GROUP_METHOD:
        scores = group_advantages(scores, group_size, GROUP_METHOD[name])
    rewards = shape_token_rewards(scores, kl, real, penalty)
    returns = discounted_returns(rewards, real, algo.gamma)
    advantages = returns
    whitened = name in (AlgorithmName.REINFORCE_PP, AlgorithmName.REINFORCE_PP_BASELINE)
    if whitened and algo.whiten_advantages:
        advantages = whiten(returns, real)
    return Advantages(advantages, returns, rewards, kl)


def kl_statistic(kl: Tensor, mask: Tensor) -> float:
    """Mean per-token KL over the batch (for reports and the adaptive KL controller)."""
    return float(masked_mean(kl, mask != 0))
