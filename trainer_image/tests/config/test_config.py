"""The job config: defaults, wire format, cross-field rules and their messages."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from rlhf_trainer.config import (
    AlgorithmName,
    JobConfig,
    JobSpec,
    RolloutConfig,
    load_document,
    role_devices,
    validation_messages,
)


def minimal(**sections: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "algorithm": {"name": "ppo"},
        "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "training": {"rolloutBatchSize": 8, "trainBatchSize": 8, "microTrainBatchSize": 2},
    }
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    return doc


def messages(doc: dict[str, Any], model: type[JobConfig] = JobConfig) -> list[str]:
    try:
        model.model_validate(doc)
    except ValidationError as err:
        return validation_messages(err)
    return []


def test_defaults_follow_openrlhf() -> None:
    cfg = JobConfig.model_validate(minimal())
    assert cfg.algorithm.clip_range() == (0.2, 0.2)
    assert cfg.algorithm.lambd == 0.95
    assert cfg.algorithm.gamma == 1.0
    assert cfg.algorithm.kl_coef == 0.01
    assert cfg.training.actor_learning_rate == 1e-6
    assert cfg.training.critic_learning_rate == 9e-6
    assert cfg.training.zero_stage == 2
    assert cfg.rollout.samples_per_prompt == 1


def test_camel_case_on_the_wire_and_snake_case_in_python() -> None:
    cfg = JobConfig.model_validate(minimal(rollout={"samplesPerPrompt": 2}))
    assert cfg.rollout.samples_per_prompt == 2
    assert RolloutConfig(samples_per_prompt=2) == cfg.rollout  # keyword construction
    dumped = cfg.to_manifest()
    assert dumped["rollout"]["samplesPerPrompt"] == 2
    assert dumped["algorithm"]["lambda"] == 0.95
    assert JobConfig.model_validate(dumped) == cfg


def test_an_explicit_null_over_a_default_survives_the_round_trips() -> None:
    """`rewardClip: null` (no clipping) is not the default 10 again after to_manifest (what the
    operator writes into the pod's job.yaml, what pipelines edit) or `rlhf run`'s overrides;
    a None that is the default stays omitted."""
    doc = minimal(
        algorithm={"rewardClip": None, "valueClip": None},
        runPolicy={"guardrails": {"maxKl": None}},
    )
    cfg = JobConfig.model_validate(doc)
    assert cfg.algorithm.reward_clip is None and cfg.algorithm.value_clip is None
    dumped = cfg.to_manifest()
    assert dumped["algorithm"]["rewardClip"] is None and dumped["algorithm"]["valueClip"] is None
    assert dumped["runPolicy"]["guardrails"]["maxKl"] is None
    assert "overlongBuffer" not in dumped["algorithm"]  # None by default: omitted
    assert JobConfig.model_validate(dumped) == cfg
    overridden = cfg.with_overrides(resume=None, max_steps=3)
    assert overridden.training.max_steps == 3
    assert overridden.algorithm.reward_clip is None and overridden.algorithm.value_clip is None
    assert overridden.run_policy.guardrails.max_kl is None
    assert (
        JobConfig.model_validate(minimal())
        .with_overrides(resume=None, max_steps=None)
        .algorithm.reward_clip
        == 10.0
    )


@pytest.mark.parametrize(
    ("sections", "field"),
    [
        ({"rollout": {"samples_per_prompt": 2}}, "rollout.samples_per_prompt"),
        ({"placement": {"node_selector": {"a": "b"}}}, "placement.node_selector"),
        ({"checkpoint": {"every_steps": 2}}, "checkpoint.every_steps"),
    ],
)
def test_snake_case_in_data_is_an_unknown_field(sections: dict[str, Any], field: str) -> None:
    """The API server prunes or refuses what the CRD does not name: so do we."""
    assert any(
        m.startswith(field) and "unknown field" in m for m in messages(minimal(**sections))
    ), messages(minimal(**sections))


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        pytest.param(
            {"algorithm": {"name": "grpo"}},
            "rollout.samplesPerPrompt: must be > 1 for algorithm grpo (got 1)",
            id="grpo-needs-groups",
        ),
        pytest.param(
            {"training": {"trainBatchSize": 6, "microTrainBatchSize": 4}},
            "training.trainBatchSize: must be divisible by microTrainBatchSize x "
            "placement.actorGpus (4 x 1 = 4); got 6",
            id="micro-batch",
        ),
        pytest.param(
            {"placement": {"criticGpus": 3}},
            "training.trainBatchSize: must be divisible by microTrainBatchSize x "
            "placement.criticGpus (2 x 3 = 6); got 8",
            id="critic-ranks",
        ),
        pytest.param(
            {"placement": {"colocateAll": True, "actorGpus": 2}},
            "placement.colocateAll: the hybrid engine puts every model and the vLLM engines on "
            "the same devices, so each role needs the same count (rollout = numEngines x "
            "tensorParallelSize); got actor=2, reference=1, critic=1, rollout=1",
            id="hybrid-engine",
        ),
        pytest.param(
            {"training": {"adamOffload": True, "zeroStage": 0}},
            "training.adamOffload: DeepSpeed offloads optimizer states only with ZeRO: set "
            "training.zeroStage >= 1",
            id="offload-needs-zero",
        ),
        pytest.param(
            {"rollout": {"maxNewTokens": 100, "maxModelLen": 1000}},
            "rollout.maxModelLen: must hold data.maxPromptLength + rollout.maxNewTokens "
            "(1024 + 100 = 1124); got 1000",
            id="model-len",
        ),
        pytest.param(
            {"checkpoint": {"resume": "never", "resumeFrom": "latest"}},
            "checkpoint.resumeFrom: names a checkpoint to resume from ('latest') but "
            "checkpoint.resume is never: remove one of them",
            id="resume-from-but-never",
        ),
        pytest.param(
            {
                "models": {
                    "actor": {"randomInit": {}},
                    "rewardFunction": {"path": "r.py", "limits": {"memoryMiB": 64}},
                }
            },
            "models.rewardFunction.limits.memoryMiB: Input should be greater than or equal to "
            "128 (got 64)",
            id="reward-memory-limit",
        ),
        pytest.param(
            {"algorithm": {"dynamicSampling": True}},
            "algorithm.dynamicSampling: drops prompt groups whose rewards are all equal, which "
            "carry no signal only for a group estimator (dr-grpo, grpo, reinforce++-baseline, "
            "rloo); algorithm ppo learns from them: set it false",
            id="dynamic-sampling-needs-groups",
        ),
        pytest.param(
            {"training": {"evalEverySteps": 5}},
            "training.evalEverySteps: evaluates on data.eval prompts: set data.eval too",
            id="eval-needs-prompts",
        ),
        pytest.param(
            {
                "algorithm": {"name": "sft"},
                "models": {"actor": {"randomInit": {}}},
                "data": {"train": [{"path": "t.jsonl"}], "eval": [{"path": "e.jsonl"}]},
            },
            "data.eval: evaluation during training runs in the RL loop (dr-grpo, grpo, ppo, "
            "reinforce++, reinforce++-baseline, rloo); it is not implemented for algorithm "
            "sft: remove it",
            id="offline-eval",
        ),
    ],
)
def test_cross_field_messages(sections: dict[str, Any], expected: str) -> None:
    assert expected in messages(minimal(**sections))


def test_dynamic_sampling_and_evaluation_pass_for_a_group_estimator() -> None:
    doc = minimal(
        algorithm={"name": "rloo", "dynamicSampling": True},
        rollout={"samplesPerPrompt": 4},
        data={"eval": [{"builtin": "repeat-letter", "split": "test"}]},
        training={"evalEverySteps": 2, "evalSamples": 8},
    )
    assert messages(doc) == []


def test_dynamic_sampling_runs_with_async_rollout() -> None:
    doc = minimal(
        algorithm={"name": "grpo", "dynamicSampling": True},
        rollout={"samplesPerPrompt": 2, "async": True, "maxStaleness": 2},
    )
    assert messages(doc) == []


def test_all_problems_are_reported_at_once() -> None:
    doc = minimal(
        algorithm={"name": "grpo"},
        rollout={"enableSleep": True},
        training={"trainBatchSize": 6, "microTrainBatchSize": 4},
    )
    paths = [line.split(":")[0] for line in messages(doc)]
    assert "rollout.samplesPerPrompt" in paths
    assert "rollout.enableSleep" in paths
    assert "training.trainBatchSize" in paths


def test_manifest_paths_are_prefixed_with_spec() -> None:
    doc = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {"name": "demo"},
        "spec": minimal(algorithm={"name": "rloo"}),
    }
    job = load_document(doc, "demo.yaml", __import__("pathlib").Path("."))
    assert job.problems == ["spec.rollout.samplesPerPrompt: must be > 1 for algorithm rloo (got 1)"]


def test_job_config_drops_kubernetes_only_parts() -> None:
    spec = JobSpec.model_validate(
        {**minimal(), "image": "trainer:1", "runPolicy": {"backoffLimit": 1}}
    )
    cfg = spec.job_config()
    assert type(cfg) is JobConfig
    assert "image" not in cfg.to_manifest()
    assert cfg.algorithm == spec.algorithm


@pytest.mark.parametrize(
    ("algorithm", "roles"),
    [
        ("ppo", {"actor", "reference", "critic", "rollout"}),
        ("grpo", {"actor", "reference", "rollout"}),
        ("sft", {"actor"}),
        ("dpo", {"actor", "reference"}),
    ],
)
def test_role_devices(algorithm: str, roles: set[str]) -> None:
    doc = minimal(algorithm={"name": algorithm}, rollout={"samplesPerPrompt": 2})
    if not AlgorithmName(algorithm).is_online:
        doc["models"].pop("rewardFunction")
    assert set(role_devices(JobConfig.model_validate(doc))) == roles


def test_unknown_and_inline_secret_fields_are_rejected() -> None:
    doc = minimal()
    doc["rollout"] = {"samplePerPrompt": 2}
    assert messages(doc) == [
        "rollout.samplePerPrompt: unknown field (check the spelling; fields are camelCase)"
    ]
    spec_doc = {**minimal(), "env": [{"name": "WANDB_API_KEY", "value": "k"}]}
    assert messages(spec_doc, JobSpec) == [
        "env[0].value: WANDB_API_KEY holds a credential and must not be inlined: reference a "
        "Secret with spec.secrets.wandbApiKey or valueFrom.secretKeyRef"
    ]
