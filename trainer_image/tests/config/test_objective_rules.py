"""`algorithm.policyLoss`, its clip defaults, and `algorithm.rolloutCorrection`: wire names,
defaults and refusals (each naming the field)."""

from __future__ import annotations

from typing import Any

import pytest
from test_config import messages, minimal

from rlhf_trainer.config import JobConfig, PolicyLoss, RolloutCorrectionMode


def algorithm(**fields: Any) -> dict[str, Any]:
    return minimal(algorithm={"name": "grpo", **fields}, rollout={"samplesPerPrompt": 2})


@pytest.mark.parametrize(
    ("loss", "clips"),
    [
        pytest.param("ppo", (0.2, 0.2), id="ppo"),
        pytest.param("gspo", (3e-4, 4e-4), id="gspo-paper"),
        pytest.param("cispo", (None, 0.2), id="cispo-no-lower-bound"),
    ],
)
def test_clip_defaults_follow_the_policy_loss(loss: str, clips: tuple[Any, float]) -> None:
    cfg = JobConfig.model_validate(algorithm(policyLoss=loss))
    assert cfg.algorithm.policy_loss is PolicyLoss(loss)
    assert cfg.algorithm.clip_range() == clips


def test_set_clips_win_over_the_loss_defaults() -> None:
    cfg = JobConfig.model_validate(algorithm(policyLoss="gspo", clipHigh=1e-3))
    assert cfg.algorithm.clip_range() == (3e-4, 1e-3)
    cfg = JobConfig.model_validate(algorithm(policyLoss="cispo", clipLow=0.5))
    assert cfg.algorithm.clip_range() == (0.5, 0.2)


def test_defaults_render_unchanged_for_ppo_manifests() -> None:
    """Unset clips are left out of the rendered config (the trainer resolves them), the loss
    is ppo and no correction runs: an existing manifest trains as before."""
    cfg = JobConfig.model_validate(minimal())
    rendered = cfg.to_manifest()["algorithm"]
    assert "clipLow" not in rendered and "clipHigh" not in rendered
    assert "rolloutCorrection" not in rendered
    assert rendered["policyLoss"] == "ppo"
    assert JobConfig.model_validate(cfg.to_manifest()) == cfg


def test_rollout_correction_defaults_and_round_trip() -> None:
    cfg = JobConfig.model_validate(algorithm(rolloutCorrection={"mode": "mis"}))
    rc = cfg.algorithm.rollout_correction
    assert rc is not None and rc.mode is RolloutCorrectionMode.MIS
    assert (rc.level.value, rc.upper, rc.lower_bound()) == ("token", 2.0, 0.5)
    assert JobConfig.model_validate(cfg.to_manifest()) == cfg


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(
            algorithm(policyLoss="gspo", lossAggregation="seq-mean-token-mean"), id="gspo"
        ),
        pytest.param(algorithm(policyLoss="cispo", clipLow=0.9, clipHigh=4.0), id="cispo"),
        pytest.param(minimal(rollout={"async": True}, algorithm={"policyLoss": "cispo"}), id="ppo"),
        pytest.param(
            algorithm(rolloutCorrection={"mode": "tis", "level": "sequence", "upper": 5}),
            id="tis-sequence",
        ),
        pytest.param(
            algorithm(rolloutCorrection={"mode": "icepop", "lower": 0.8, "upper": 1.25}),
            id="icepop",
        ),
        pytest.param(
            minimal(
                algorithm={"policyLoss": "gspo", "rolloutCorrection": {"mode": "mis"}},
                rollout={"async": True, "partialRollout": True},
            ),
            id="async-partial-mis",
        ),
    ],
)
def test_valid_combinations(doc: dict[str, Any]) -> None:
    assert messages(doc) == []


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            algorithm(policyLoss="grpo"),
            "algorithm.policyLoss: Input should be 'ppo', 'gspo' or 'cispo'",
            id="unknown-loss",
        ),
        pytest.param(
            algorithm(policyLoss="gspo", dualClip=3.0),
            "algorithm.dualClip: caps PPO's clipped surrogate where advantages are negative; "
            "policyLoss gspo has no such term",
            id="dual-clip",
        ),
        pytest.param(
            algorithm(policyLoss="gspo", lossAggregation="seq-mean-token-sum"),
            "algorithm.lossAggregation: policyLoss gspo aggregates as its paper does "
            "(seq-mean-token-mean); got seq-mean-token-sum",
            id="gspo-aggregation",
        ),
        pytest.param(
            algorithm(policyLoss="cispo", lossAggregation="seq-mean-token-mean"),
            "algorithm.lossAggregation: policyLoss cispo aggregates as its paper does (token-mean)",
            id="cispo-aggregation",
        ),
        pytest.param(
            minimal(algorithm={"name": "rejection-sampling", "policyLoss": "gspo"}),
            "); rejection-sampling does not train on a policy-gradient loss: remove it",
            id="loss-iterative",
        ),
        pytest.param(
            algorithm(clipLow=1.5),
            "algorithm.clipLow: Input should be less than 1",
            id="clip-low-bound",
        ),
        pytest.param(
            algorithm(rolloutCorrection={}),
            "algorithm.rolloutCorrection.mode: required field is missing",
            id="mode-required",
        ),
        pytest.param(
            algorithm(rolloutCorrection={"mode": "is"}),
            "algorithm.rolloutCorrection.mode: Input should be 'tis', 'mis' or 'icepop'",
            id="unknown-mode",
        ),
        pytest.param(
            algorithm(rolloutCorrection={"mode": "tis", "upper": 1.0}),
            "algorithm.rolloutCorrection.upper: Input should be greater than 1",
            id="upper-bound",
        ),
        pytest.param(
            algorithm(rolloutCorrection={"mode": "tis", "lower": 0.5}),
            "algorithm.rolloutCorrection.lower: tis truncates above upper only",
            id="tis-lower",
        ),
        pytest.param(
            algorithm(rolloutCorrection={"mode": "icepop", "level": "sequence"}),
            "algorithm.rolloutCorrection.level: icepop drops single tokens",
            id="icepop-sequence",
        ),
        pytest.param(
            algorithm(rolloutCorrection={"mode": "tis"})
            | {"rollout": {"engine": "hf", "samplesPerPrompt": 2}},
            "algorithm.rolloutCorrection: corrects for the vLLM engines' sampling; with "
            "rollout.engine hf",
            id="hf-engine",
        ),
        pytest.param(
            minimal(algorithm={"name": "iterative-dpo", "rolloutCorrection": {"mode": "tis"}}),
            "algorithm.rolloutCorrection: weights a policy-gradient loss",
            id="correction-iterative",
        ),
    ],
)
def test_refusals_name_the_field(doc: dict[str, Any], expected: str) -> None:
    found = messages(doc)
    assert any(expected in line for line in found), found


def test_offline_algorithms_refuse_the_online_objective_choices() -> None:
    doc = minimal(
        algorithm={"name": "sft", "policyLoss": "cispo", "rolloutCorrection": {"mode": "tis"}}
    )
    doc["models"].pop("rewardFunction")
    found = messages(doc)
    assert any(m.startswith("algorithm.policyLoss: applies to the policy-gradient") for m in found)
    assert any(
        m.startswith("algorithm.rolloutCorrection: weights a policy-gradient") for m in found
    )
