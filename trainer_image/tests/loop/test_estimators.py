"""Advantages per algorithm: each composes `rlhf_trainer.algos` as its paper prescribes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlhf_trainer.algos.rewards import RunningMeanStd
from rlhf_trainer.config import AlgorithmConfig
from rlhf_trainer.loop.estimators import compute_advantages, kl_statistic, process_scores

# Two prompts x two samples; the second sample of each prompt is one token shorter.
SCORES = torch.tensor([1.0, 0.0, 3.0, 1.0])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]])
ZERO = torch.zeros(4, 3)


def algo(name: str, **kw: Any) -> AlgorithmConfig:
    return AlgorithmConfig.model_validate({"name": name, **kw})


def advantages(cfg: AlgorithmConfig, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "old_logp": ZERO,
        "ref_logp": ZERO,
        "values": ZERO if cfg.name.value == "ppo" else None,
        "kl_coef": 0.0,
        "group_size": 2,
    }
    args.update(kw)
    return compute_advantages(cfg, SCORES, MASK, **args)


def per_sequence(x: torch.Tensor) -> list[float]:
    """Advantage of the first token of each row (outcome estimators broadcast one value)."""
    return [round(float(v), 4) for v in x[:, 0]]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("grpo", [0.7071, -0.7071, 0.7071, -0.7071], id="grpo-mean-std"),
        pytest.param("dr-grpo", [0.5, -0.5, 1.0, -1.0], id="dr-grpo-mean-only"),
        pytest.param("rloo", [1.0, -1.0, 2.0, -2.0], id="rloo-leave-one-out"),
    ],
)
def test_group_estimators_broadcast_the_group_baseline(name: str, expected: list[float]) -> None:
    out = advantages(algo(name))
    assert per_sequence(out.advantages) == expected
    # Every real token of a row carries the row's advantage; padding carries 0.
    assert torch.equal(out.advantages[:, 0:1].expand(-1, 3) * MASK, out.advantages)


def test_ppo_with_zero_values_and_unit_discount_gives_the_score_on_every_token() -> None:
    out = advantages(algo("ppo", whitenAdvantages=False, **{"lambda": 1.0}))
    assert torch.allclose(out.advantages, SCORES[:, None] * MASK)
    assert torch.allclose(out.returns, SCORES[:, None] * MASK)


def test_ppo_reward_sits_on_the_eos_token_minus_the_kl_penalty() -> None:
    logp = torch.full((4, 3), -1.0)
    out = advantages(algo("ppo"), old_logp=logp, ref_logp=torch.full((4, 3), -1.5), kl_coef=0.1)
    # k1 = logp - ref = 0.5 per token; EOS (last real token) also gets the score.
    assert torch.allclose(out.token_rewards[0], torch.tensor([-0.05, -0.05, 1.0 - 0.05]))
    assert torch.allclose(out.token_rewards[1], torch.tensor([-0.05, 0.0 - 0.05, 0.0]))
    assert kl_statistic(out.kl, MASK) == pytest.approx(0.5)


def test_kl_loss_moves_the_kl_out_of_the_rewards() -> None:
    logp = torch.full((4, 3), -1.0)
    cfg = algo("grpo", useKlLoss=True)
    out = advantages(cfg, old_logp=logp, ref_logp=torch.full((4, 3), -1.5), kl_coef=0.1)
    without_kl = advantages(cfg)
    assert torch.equal(out.token_rewards, without_kl.token_rewards)
    assert torch.equal(out.advantages, without_kl.advantages)


@pytest.mark.parametrize("name", ["reinforce++", "reinforce++-baseline", "ppo"])
def test_whitened_estimators_have_zero_mean_unit_variance(name: str) -> None:
    out = advantages(algo(name))
    real = MASK.bool()
    assert float(out.advantages[real].mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(out.advantages[real].var(unbiased=False)) == pytest.approx(1.0, abs=1e-4)


def test_reinforce_baseline_subtracts_the_group_mean_before_whitening() -> None:
    plain = advantages(algo("reinforce++", whitenAdvantages=False))
    based = advantages(algo("reinforce++-baseline", whitenAdvantages=False))
    assert per_sequence(plain.advantages) == [1.0, 0.0, 3.0, 1.0]
    assert per_sequence(based.advantages) == [0.5, -0.5, 1.0, -1.0]


def test_scores_are_clipped_then_normalised() -> None:
    cfg = algo("ppo", rewardClip=2.0, normalizeReward=True)
    norm = RunningMeanStd()
    out = process_scores(torch.tensor([5.0, -5.0, 0.0, 1.0]), cfg, norm)
    clipped = torch.tensor([2.0, -2.0, 0.0, 1.0])
    expected = (clipped - clipped.mean()) / clipped.var(unbiased=False).sqrt()
    assert torch.allclose(out, expected, atol=1e-5)


def test_ppo_without_values_is_an_error() -> None:
    with pytest.raises(ValueError, match="critic"):
        advantages(algo("ppo"), values=None)
