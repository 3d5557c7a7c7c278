"""The iterative algorithms' config: their knobs, every refusal (with the field it names), the
roles the layout places for them, and how many rounds a run has."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rlhf_trainer.config import JobConfig, role_devices, validation_messages
from rlhf_trainer.context.job import total_steps


def doc(name: str = "rejection-sampling", **sections: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "algorithm": {"name": name},
        "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "rollout": {"samplesPerPrompt": 4},
        "training": {"rolloutBatchSize": 8, "trainBatchSize": 8, "microTrainBatchSize": 2},
    }
    for key, value in sections.items():
        out[key] = {**out.get(key, {}), **value}
    return out


def messages(body: dict[str, Any]) -> list[str]:
    try:
        JobConfig.model_validate(body)
    except ValidationError as err:
        return validation_messages(err)
    return []


@pytest.mark.parametrize("algorithm", ["rejection-sampling", "iterative-dpo"])
def test_the_examples_shape_is_valid(algorithm: str) -> None:
    assert messages(doc(algorithm, algorithm={"name": algorithm, "iterations": 3})) == []


REFUSALS = [
    ("rs-one-sample", doc(rollout={"samplesPerPrompt": 1}), "rollout.samplesPerPrompt"),
    ("idpo-one-sample", doc("iterative-dpo", rollout={"samplesPerPrompt": 1}), "rollout."),
    ("no-reward-source", doc(models={"rewardFunction": None}), "models"),
    ("iterations-on-ppo", doc("ppo", algorithm={"name": "ppo", "iterations": 3}), "algorithm."),
    (
        "threshold-on-idpo",
        doc("iterative-dpo", algorithm={"name": "iterative-dpo", "rewardThreshold": 0.5}),
        "algorithm.rewardThreshold",
    ),
    (
        "refresh-on-rs",
        doc(algorithm={"name": "rejection-sampling", "refreshReference": True}),
        "algorithm.refreshReference",
    ),
    (
        "refresh-with-a-fixed-reference",
        doc(
            "iterative-dpo",
            algorithm={"name": "iterative-dpo", "refreshReference": True},
            models={"reference": {"randomInit": {}}},
        ),
        "algorithm.refreshReference",
    ),
    (
        "normalize-reward",
        doc(algorithm={"name": "rejection-sampling", "normalizeReward": True}),
        "algorithm.normalizeReward",
    ),
    (
        "overlong-buffer",
        doc(algorithm={"name": "rejection-sampling", "overlongBuffer": 4}),
        "algorithm.overlongBuffer",
    ),
    (
        "kl-loss",
        doc("iterative-dpo", algorithm={"name": "iterative-dpo", "useKlLoss": True}),
        "algorithm.useKlLoss",
    ),
    ("agent", doc(rollout={"agent": {"mode": "single-turn"}}), "rollout.agent"),
    ("ppo-epochs", doc(training={"ppoEpochs": 2}), "training.ppoEpochs"),
    ("batch-vs-ranks", doc(training={"trainBatchSize": 7}), "training.trainBatchSize"),
]


@pytest.mark.parametrize(("body", "field"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_field(body: dict[str, Any], field: str) -> None:
    problems = messages(body)
    assert any(p.startswith(field) for p in problems), problems


def test_a_threshold_allows_one_sample_per_prompt() -> None:
    body = doc(algorithm={"name": "rejection-sampling", "rewardThreshold": 0.9})
    body["rollout"]["samplesPerPrompt"] = 1
    assert messages(body) == []


def test_a_round_may_select_any_number_of_samples() -> None:
    # rolloutBatchSize x samplesPerPrompt need not be a multiple of trainBatchSize: a round
    # trains on what it selected (PPO's rule does not apply).
    assert messages(doc(training={"rolloutBatchSize": 3})) == []


@pytest.mark.parametrize(
    ("algorithm", "extra", "roles"),
    [
        ("rejection-sampling", {}, {"actor", "rollout"}),
        ("iterative-dpo", {}, {"actor", "reference", "rollout"}),
        ("iterative-dpo", {"refreshReference": True}, {"actor", "rollout"}),
    ],
    ids=["rs", "idpo-fixed-reference", "idpo-refreshed-reference"],
)
def test_roles(algorithm: str, extra: dict[str, Any], roles: set[str]) -> None:
    cfg = JobConfig.model_validate(doc(algorithm, algorithm={"name": algorithm, **extra}))
    assert set(role_devices(cfg)) == roles
    with_rm = doc(algorithm, algorithm={"name": algorithm, **extra})
    with_rm["models"] = {"actor": {"randomInit": {}}, "rewardModels": [{"randomInit": {}}]}
    assert set(role_devices(JobConfig.model_validate(with_rm))) == roles | {"reward"}


def test_rounds_iterations_then_the_data() -> None:
    rounds = JobConfig.model_validate(
        doc(algorithm={"name": "rejection-sampling", "iterations": 5})
    )
    assert total_steps(rounds, 1000) == 5
    capped = rounds.with_overrides(resume=None, max_steps=2)
    assert total_steps(capped, 1000) == 2
    by_data = JobConfig.model_validate(doc())
    assert total_steps(by_data, 40) == 5  # 40 prompts / rolloutBatchSize 8
