"""Rules of on-policy distillation (a teacher, no reward source) and of checkpoint.keepBest."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rlhf_trainer.config import BestMode, JobConfig, validation_messages
from rlhf_trainer.config.roles import active_roles

TINY = {"randomInit": {}}


def opd(**sections: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "algorithm": {"name": "on-policy-distillation"},
        "models": {"actor": TINY, "teacher": {"randomInit": {"seed": 1}}},
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "training": {"rolloutBatchSize": 8, "trainBatchSize": 8, "microTrainBatchSize": 2},
    }
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    return doc


def messages(doc: dict[str, Any]) -> list[str]:
    try:
        JobConfig.model_validate(doc)
    except ValidationError as err:
        return validation_messages(err)
    return []


def test_on_policy_distillation_runs_a_student_a_teacher_and_engines() -> None:
    cfg = JobConfig.model_validate(opd())
    assert cfg.algorithm.name.is_online
    assert not cfg.algorithm.name.needs_reward_source
    # No reference (the teacher takes its place), no critic, no reward model.
    assert active_roles(cfg) == ("actor", "teacher", "rollout")


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            opd(models={"actor": TINY, "teacher": None}),
            "models.teacher: algorithm on-policy-distillation scores the student's sampled "
            "tokens with a teacher's log-probs: set models.teacher",
            id="needs-a-teacher",
        ),
        pytest.param(
            opd(models={"rewardFunction": {"builtin": "repeat-letter"}}),
            "models.rewardFunction: algorithm on-policy-distillation is rewarded by the teacher "
            "alone (per token, -(logp_student - logp_teacher)); it uses no reward source: "
            "remove it",
            id="no-reward-function",
        ),
        pytest.param(
            opd(models={"rewardModels": [TINY]}),
            "models.rewardModels: algorithm on-policy-distillation is rewarded by the teacher",
            id="no-reward-model",
        ),
        pytest.param(
            opd(models={"teacher": {"randomInit": {"vocabSize": 1024}}}),
            "models.teacher.randomInit.vocabSize: the teacher must share the actor's tokenizer "
            "(its log-probs are read at the actor's token ids): got 1024, the actor's is 512",
            id="same-vocabulary",
        ),
        pytest.param(
            opd(data={"eval": [{"builtin": "repeat-letter"}]}),
            "data.eval: evaluation scores responses with the job's reward sources, and "
            "algorithm on-policy-distillation has none",
            id="no-eval-without-rewards",
        ),
        pytest.param(
            opd(placement={"auto": True, "totalGpus": 8, "gpuMemoryGiB": 80}),
            "placement.auto: does not place a teacher (on-policy-distillation) yet",
            id="auto-placement",
        ),
        pytest.param(
            opd(algorithm={"name": "grpo"}, rollout={"samplesPerPrompt": 2}),
            "models.teacher: only algorithms distillation and on-policy-distillation use a "
            "teacher (got grpo): remove it",
            id="teacher-only-for-distillation",
        ),
        pytest.param(
            opd(checkpoint={"keepBest": {"metric": "eval/pass@1"}}),
            "checkpoint.keepBest.metric: eval/pass@1 is reported by evaluations on data.eval "
            "prompts: set data.eval",
            id="best-by-eval-needs-eval",
        ),
        pytest.param(
            opd(checkpoint={"keepBest": {"metric": "eval pass"}}),
            "checkpoint.keepBest.metric: String should match pattern",
            id="best-metric-name",
        ),
    ],
)
def test_refused_with_the_field_named(doc: dict[str, Any], expected: str) -> None:
    found = messages(doc)
    assert any(expected in m for m in found), found


def test_keep_best_by_a_training_metric_needs_no_eval() -> None:
    cfg = JobConfig.model_validate(
        opd(checkpoint={"keepBest": {"metric": "distill/reverse_kl", "mode": "min"}})
    )
    assert cfg.checkpoint.keep_best is not None
    assert cfg.checkpoint.keep_best.mode is BestMode.MIN
    assert cfg.to_manifest()["checkpoint"]["keepBest"] == {
        "metric": "distill/reverse_kl",
        "mode": "min",
    }
