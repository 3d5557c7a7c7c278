"""The actor's objective: PPO surrogate, plus KL loss and entropy bonus when configured."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from rlhf_trainer.algos.kl import kl_estimate
from rlhf_trainer.algos.losses import (
    aggregate_loss,
    cispo_policy_loss,
    gspo_policy_loss,
    ppo_policy_loss,
)
from rlhf_trainer.config import JobConfig
from rlhf_trainer.objectives.online import (
    PolicyLossSettings,
    critic_objective,
    policy_gradient_loss,
    policy_objective,
)

LOGP = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, 0.0]])
OLD = LOGP - 0.1
REF = LOGP - 0.4
ADV = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def settings(**algorithm: object) -> PolicyLossSettings:
    cfg = JobConfig.model_validate(
        {
            "algorithm": {"name": "grpo", **algorithm},
            "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
            "data": {"train": [{"builtin": "repeat-letter"}]},
            "rollout": {"samplesPerPrompt": 2, "maxNewTokens": 7},
            "training": {"rolloutBatchSize": 4, "trainBatchSize": 8, "microTrainBatchSize": 2},
        }
    )
    return PolicyLossSettings.from_job(cfg)


def test_plain_objective_is_the_ppo_surrogate() -> None:
    loss, stats = policy_objective(LOGP, OLD, ADV, MASK, settings(), kl_coef=0.1)
    expected, _ = ppo_policy_loss(LOGP, OLD, ADV, MASK)
    assert torch.equal(loss, expected)
    assert "kl_loss" not in stats and "entropy" not in stats


def test_kl_loss_adds_the_weighted_estimate() -> None:
    s = settings(useKlLoss=True, klEstimator="k3")
    loss, stats = policy_objective(LOGP, OLD, ADV, MASK, s, kl_coef=0.1, ref_logp=REF)
    surrogate, _ = ppo_policy_loss(LOGP, OLD, ADV, MASK)
    kl = aggregate_loss(kl_estimate(LOGP, REF, "k3", mask=MASK), MASK, "token-mean")
    assert torch.allclose(loss, surrogate + 0.1 * kl)
    assert torch.allclose(stats["kl_loss"], kl)


def test_kl_loss_without_reference_is_an_error() -> None:
    with pytest.raises(ValueError, match="reference log-probs"):
        policy_objective(LOGP, OLD, ADV, MASK, settings(useKlLoss=True), kl_coef=0.1)


def test_entropy_bonus_lowers_the_loss_and_entropy_is_reported_either_way() -> None:
    entropy = torch.full((2, 3), 2.0)
    plain, stats = policy_objective(LOGP, OLD, ADV, MASK, settings(), kl_coef=0.0, entropy=entropy)
    bonus, _ = policy_objective(
        LOGP, OLD, ADV, MASK, settings(entropyCoef=0.01), kl_coef=0.0, entropy=entropy
    )
    assert torch.allclose(bonus, plain - 0.01 * 2.0)
    assert float(stats["entropy"]) == pytest.approx(2.0)


def test_token_sum_norm_divides_by_the_generation_limit() -> None:
    s = settings(lossAggregation="seq-mean-token-sum-norm")
    assert s.norm_length == 7.0  # rollout.maxNewTokens
    loss, _ = policy_objective(LOGP, OLD, ADV, MASK, s, kl_coef=0.0)
    expected, _ = ppo_policy_loss(
        LOGP, OLD, ADV, MASK, aggregation="seq-mean-token-sum-norm", norm_length=7.0
    )
    assert torch.equal(loss, expected)


def test_critic_objective_reports_value_statistics() -> None:
    values = torch.zeros(2, 3, requires_grad=True)
    loss, stats = critic_objective(values, torch.zeros(2, 3), torch.ones(2, 3), MASK, clip=0.2)
    assert float(loss.detach()) == pytest.approx(0.5)
    assert {"value_loss", "value_clip_frac", "value_values_mean"} <= set(stats)
    loss.backward()
    assert values.grad is not None


# --- policyLoss and rolloutCorrection ------------------------------------------------------
ROLLOUT = LOGP - torch.tensor([[0.0, 1.5, 0.05], [-1.0, 0.2, 0.0]])  # the engine's log-probs
REAL = MASK.bool()


def test_gspo_and_cispo_take_their_papers_clips() -> None:
    gspo, _ = policy_objective(LOGP, OLD, ADV, MASK, settings(policyLoss="gspo"), kl_coef=0.0)
    assert torch.equal(gspo, gspo_policy_loss(LOGP, OLD, ADV, MASK, 3e-4, 4e-4)[0])
    cispo, stats = policy_objective(LOGP, OLD, ADV, MASK, settings(policyLoss="cispo"), kl_coef=0.0)
    assert torch.equal(cispo, cispo_policy_loss(LOGP, OLD, ADV, MASK, 0.2, None)[0])
    assert {"policy_loss", "clip_frac", "ratio_mean", "approx_kl"} <= set(stats)


def test_correction_without_the_engines_log_probs_is_an_error() -> None:
    s = settings(rolloutCorrection={"mode": "tis"})
    with pytest.raises(ValueError, match="rolloutCorrection needs the engine's sampling"):
        policy_objective(LOGP, OLD, ADV, MASK, s, kl_coef=0.0)


def _token_losses(logp: Tensor) -> Tensor:
    """PPO's per-token loss at the default clips (no aggregation)."""
    ratio = (logp - OLD).exp()
    return torch.maximum(-ADV * ratio, -ADV * ratio.clamp(0.8, 1.2))


@pytest.mark.parametrize("loss", ["ppo", "gspo", "cispo"])
def test_tis_multiplies_each_tokens_loss_by_the_truncated_ratio(loss: str) -> None:
    s = settings(policyLoss=loss, rolloutCorrection={"mode": "tis", "upper": 2.0})
    weights = (OLD - ROLLOUT).exp().clamp(max=2.0)
    corrected, _ = policy_objective(LOGP, OLD, ADV, MASK, s, kl_coef=0.0, rollout_logp=ROLLOUT)
    expected, _ = policy_gradient_loss(LOGP, OLD, ADV, MASK, settings(policyLoss=loss), weights)
    assert torch.allclose(corrected, expected)
    assert not torch.allclose(
        corrected, policy_objective(LOGP, OLD, ADV, MASK, s, kl_coef=0.0, rollout_logp=OLD)[0]
    )


def test_mis_drops_tokens_but_keeps_them_in_the_token_mean() -> None:
    s = settings(rolloutCorrection={"mode": "mis", "upper": 2.0})
    rho = (OLD - ROLLOUT).exp()
    kept = REAL & (rho >= 0.5) & (rho <= 2.0)
    assert 0 < int(kept.sum()) < int(REAL.sum())  # the case drops some tokens
    loss, _ = policy_objective(LOGP, OLD, ADV, MASK, s, kl_coef=0.0, rollout_logp=ROLLOUT)
    expected = torch.where(kept, _token_losses(LOGP) * rho, 0.0).sum() / REAL.sum()
    assert torch.allclose(loss, expected)


def test_icepop_leaves_dropped_tokens_out_of_the_denominator() -> None:
    s = settings(rolloutCorrection={"mode": "icepop", "upper": 2.0})
    rho = (OLD - ROLLOUT).exp()
    kept = REAL & (rho >= 0.5) & (rho <= 2.0)
    loss, _ = policy_objective(LOGP, OLD, ADV, MASK, s, kl_coef=0.0, rollout_logp=ROLLOUT)
    expected = torch.where(kept, _token_losses(LOGP) * rho, 0.0).sum() / kept.sum()
    assert torch.allclose(loss, expected)


def test_dropped_tokens_get_no_gradient_and_entropy_keeps_the_response_mask() -> None:
    s = settings(rolloutCorrection={"mode": "icepop"}, entropyCoef=0.01)
    logp = LOGP.clone().requires_grad_(True)
    entropy = torch.full((2, 3), 2.0)
    loss, stats = policy_objective(
        logp, OLD, ADV, MASK, s, kl_coef=0.0, rollout_logp=ROLLOUT, entropy=entropy
    )
    loss.backward()
    rho = (OLD - ROLLOUT).exp()
    dropped = REAL & ((rho < 0.5) | (rho > 2.0))
    assert logp.grad is not None and bool((logp.grad[dropped] == 0).all())
    assert bool((logp.grad[REAL & ~dropped] != 0).all())
    assert float(stats["entropy"]) == pytest.approx(2.0)
