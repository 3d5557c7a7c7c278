"""One truth about what can run: `rlhf validate`, the operator and the trainer refuse the same
specs with the same field-level message, and the GPUs the operator requests are the devices
the trainer places, per role and in total."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rlhf_operator.api.v1alpha1 import ConditionType
from rlhf_operator.builders.children import Children, render_children
from rlhf_operator.builders.common import CONFIG_KEY, config_map_name
from rlhf_operator.reconcile.decide import decide
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.settings import OperatorSettings
from rlhf_trainer.config import JobConfig, JobSpec, load_document, plan_layout
from rlhf_trainer.distributed.plan import REWARD, plan_placement, reward_role
from support.examples import example_files, readme_job

from .factories import job_body, make_job, merge, spec_dict

SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ONLINE = {"models": {"rewardModels": None, "rewardFunction": {"builtin": "repeat-letter"}}}

# Every refusal the trainer used to make only inside the pod (after taking its GPUs), and the
# field it names. Each is now a shared config rule.
TRAINER_REFUSALS = [
    (
        "packing-with-remote-code",
        {
            "training": {"packingSamples": True},
            "models": {"actor": {"trustRemoteCode": True}},
        },
        "training.packingSamples",
    ),
    (
        "flash-attention-on-cpu",
        {
            "algorithm": {"name": "sft"},
            "models": {"rewardModels": None},
            "placement": {"device": "cpu"},
            "training": {"attnImplementation": "flash_attention_2"},
        },
        "training.attnImplementation",
    ),
    (
        "tensor-parallel-uneven-heads",
        {
            "algorithm": {"name": "grpo"},
            "models": {
                "actor": {"pretrained": None, "randomInit": {"hiddenSize": 96, "numHeads": 3}},
                "rewardModels": None,
                "rewardFunction": {"builtin": "repeat-letter"},
            },
            "rollout": {"numEngines": 1, "tensorParallelSize": 2},
        },
        "rollout.tensorParallelSize",
    ),
    (
        "hf-engine-tensor-parallel",
        {"rollout": {"engine": "hf", "tensorParallelSize": 2}},
        "rollout.tensorParallelSize",
    ),
    (
        "sleep-mode-on-cpu",
        {
            "placement": {"device": "cpu", "colocateAll": True, "referenceGpus": 1},
            "rollout": {"enableSleep": True},
            "algorithm": {"name": "grpo"},
            **ONLINE,
        },
        "rollout.enableSleep",
    ),
    (
        "ipo-label-smoothing",
        {"algorithm": {"name": "ipo", "labelSmoothing": 0.1}, "models": {"rewardModels": None}},
        "algorithm.labelSmoothing",
    ),
    (
        "reward-model-lora",
        {
            "algorithm": {"name": "reward-model"},
            "models": {"rewardModels": None},
            "training": {"lora": {"rank": 8}},
        },
        "training.lora",
    ),
    (
        "unknown-builtin-data",
        {"data": {"train": [{"builtin": "gsm8k"}]}},
        "data.train[0].builtin",
    ),
    (
        "bad-builtin-parameter",
        {"data": {"train": [{"builtin": "repeat-letter:aa"}]}},
        "data.train[0].builtin",
    ),
    (
        "unknown-builtin-reward",
        {"models": {"rewardModels": None, "rewardFunction": {"builtin": "gsm8k"}}},
        "models.rewardFunction.builtin",
    ),
    (
        "auto-placement-too-few-gpus",
        {"placement": {"auto": True, "modelSize": "70B", "totalGpus": 2}},
        "placement.totalGpus",
    ),
]


@pytest.mark.parametrize(
    ("spec_patch", "field"),
    [c[1:] for c in TRAINER_REFUSALS],
    ids=[c[0] for c in TRAINER_REFUSALS],
)
def test_every_trainer_refusal_is_caught_by_all_three(
    spec_patch: dict[str, Any], field: str
) -> None:
    spec = spec_dict(**spec_patch)
    manifest = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {"name": "refused"},
        "spec": spec,
    }
    # rlhf validate
    validated = load_document(manifest, "refused.yaml", Path("."))
    lines = [p for p in validated.problems if p.startswith(f"spec.{field}:")]
    assert lines, validated.problems
    # the operator: Valid=False, nothing applied
    decision = decide(job_body(spec=spec), Observed(), SETTINGS, NOW)
    assert decision.apply == ()
    valid = next(c for c in decision.status.conditions if c.type is ConditionType.VALID)
    assert valid.status == "False"
    assert lines[0] in valid.message
    # the trainer: its job config refuses it with the same words
    trainer_spec = {k: v for k, v in spec.items() if k in JobConfig.model_fields}
    with pytest.raises(ValidationError) as err:
        JobConfig.model_validate(trainer_spec)
    assert lines[0].removeprefix("spec.") in str(err.value)


def test_a_refused_spec_has_no_plan(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    spec = spec_dict(rollout={"engine": "hf", "tensorParallelSize": 2})
    path.write_text(
        json.dumps(
            {
                "apiVersion": "rlhf.dev/v1alpha1",
                "kind": "RLHFJob",
                "metadata": {"name": "bad"},
                "spec": spec,
            }
        )
    )
    result = _rlhf("plan", str(path))
    assert result.returncode == 1
    assert "spec.rollout.tensorParallelSize: applies to vLLM engines only" in result.stderr


def _rlhf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlhf_trainer", *args], capture_output=True, text=True, check=False
    )


def test_every_example_and_the_readme_job_validate_and_plan(tmp_path: Path) -> None:
    files = [*map(str, example_files()), str(readme_job(tmp_path))]
    validated = _rlhf("validate", *files)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    planned = _rlhf("plan", "--output", "json", *files)
    assert planned.returncode == 0, planned.stderr
    plans = json.loads(planned.stdout)
    # One plan per job, and one per stage of a pipeline.
    stages = sum(
        len(yaml.safe_load(Path(f).read_text())["spec"].get("stages", [None])) for f in files
    )
    assert len(plans) == stages
    for plan in plans:
        devices = sum(p["replicas"] * p["devices"] for p in plan["pods"])
        assert devices == plan["totalDevices"] > 0, plan["source"]


# --- the operator's GPUs == the trainer's devices, over generated specs ---------------------

ONLINE_ALGORITHMS = ["ppo", "grpo", "rloo", "reinforce++", "rejection-sampling", "iterative-dpo"]
ALGORITHMS = [
    *ONLINE_ALGORITHMS,
    "sft",
    "dpo",
    "kto",
    "reward-model",
    "conditional-sft",
    "distillation",
    "prm",
]


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    algorithm = draw(st.sampled_from(ALGORITHMS))
    online = algorithm in ONLINE_ALGORITHMS
    counts = st.sampled_from([1, 2, 4, 8])
    reward_models = draw(st.integers(0, 2)) if online else 0
    models: dict[str, Any] = {"rewardModels": None}
    if reward_models:
        models["rewardModels"] = [{"pretrained": f"org/rm-{i}"} for i in range(reward_models)]
    elif online:
        models["rewardFunction"] = {"builtin": "repeat-letter"}
    if algorithm == "distillation":
        models["teacher"] = {"pretrained": "org/teacher"}
    colocate_all = draw(st.booleans())
    actor = draw(counts)
    placement = {
        "device": draw(st.sampled_from(["gpu", "cpu"])),
        "actorGpus": actor,
        "criticGpus": actor if colocate_all else draw(counts),
        "referenceGpus": actor if colocate_all else draw(counts),
        "teacherGpus": actor if colocate_all else draw(counts),
        "rewardGpus": actor if colocate_all else draw(counts),
        "colocateActorReference": draw(st.booleans()),
        "colocateCriticReward": draw(st.booleans()),
        "colocateAll": colocate_all,
        "gpusPerNode": draw(st.sampled_from([1, 2, 4, 8])),
    }
    if placement["colocateActorReference"]:
        placement["referenceGpus"] = placement["teacherGpus"] = actor
    if placement["colocateCriticReward"]:
        placement["rewardGpus"] = placement["criticGpus"]
    engine = draw(st.sampled_from(["vllm", "hf"]))
    tp = draw(st.sampled_from([1, 2, 4])) if engine == "vllm" else 1
    rollout = {
        "engine": engine,
        # The hybrid engine's vLLM ranks (engines x tp) use the actor's devices.
        "numEngines": max(1, actor // tp) if colocate_all else draw(counts),
        "tensorParallelSize": tp,
        "samplesPerPrompt": 4,
    }
    if draw(st.booleans()):  # placement.auto chooses; the counts drawn above are ignored
        placement |= {
            "device": "gpu",
            "auto": True,
            "modelSize": draw(st.sampled_from(["0.5B", "1.5B", "7B", "13B"])),
            "totalGpus": draw(st.sampled_from([1, 2, 4, 8, 16, 32])),
            "gpuMemoryGiB": draw(st.sampled_from([24, 40, 80, 141])),
        }
    return merge(
        spec_dict(models=models),
        {
            "algorithm": {
                "name": algorithm,
                "klCoef": draw(st.sampled_from([0.0, 0.01])),
                # iterative-dpo: a fixed reference (placed) or the policy of each round's start.
                **(
                    {"refreshReference": draw(st.booleans())}
                    if algorithm == "iterative-dpo"
                    else {}
                ),
            },
            "placement": placement,
            "rollout": rollout,
        },
    )


def _gpus_requested(ray_job: dict[str, Any], spec: JobSpec) -> int:
    """What the RayJob's worker pods ask Kubernetes (GPUs) or Ray (CPU-device ranks) for."""
    total = 0
    for group in ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        [container] = group["template"]["spec"]["containers"]
        if spec.placement.device == "gpu":
            per_pod = int(container["resources"]["limits"][spec.placement.gpu_resource_name])
        else:
            per_pod = int(group["rayStartParams"]["num-gpus"])
        total += group["replicas"] * per_pod
    return total


def _pods_job_config(children: Children, name: str) -> JobConfig:
    """The job config the trainer reads in the pods (placement.auto resolved there)."""
    [config_map] = [
        o
        for o in children.support
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == config_map_name(name)
    ]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the pure one is slow
    return JobConfig.model_validate(yaml.load(config_map["data"][CONFIG_KEY], Loader=loader))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(specs())
def test_operator_gpus_equal_trainer_devices(raw: dict[str, Any]) -> None:
    try:
        spec = JobSpec.model_validate(raw)
    except ValidationError:
        assume(False)
        return
    job = make_job(spec=raw)
    children = render_children(job, SETTINGS)
    trainer = plan_placement(_pods_job_config(children, job.name))
    allocation = children.allocation
    # In total: what the pods request, what the operator reports, what Ray is asked for.
    requested = _gpus_requested(children.ray_job, spec)
    assert requested == allocation.total_gpus == trainer.total_devices
    # Per device group: the same groups with the same devices.
    assert {g.name: g.devices for g in trainer.groups} == allocation.gpus_per_role
    # Per role: every rank the trainer starts sits in a group the operator planned.
    for group in trainer.groups:
        roles = {REWARD if s.role.startswith(REWARD) else s.role for s in group.shares}
        assert roles == set(group.name.split("+"))
        for share in group.shares:
            assert share.ranks <= group.devices
    # An engine's tensor-parallel ranks: one placement group each, the layout's unit, which
    # the operator packs whole into one pod.
    layout = plan_layout(spec.job_config())
    for group in trainer.groups:
        unit = layout.groups[[g.name for g in layout.groups].index(group.name)].unit
        assert group.bundles_per_set == (unit if unit > 1 else group.devices)
        assert group.sets * group.bundles_per_set == group.devices
        if unit > 1:
            assert group.strategy == "STRICT_PACK"
            assert all(p.devices >= unit for p in layout.pods if "rollout" in p.roles)
        models = len(spec.models.reward_models) if spec.algorithm.name.is_online else 0
    placed_rewards = [r for r in trainer.roles() if r.startswith(REWARD)]
    assert placed_rewards == [reward_role(i) for i in range(models)]


def test_examples_a_cluster_cannot_take_as_written_ship_through_their_kustomization() -> None:
    from rlhf_trainer.config import cluster_problems, load_file
    from support.examples import local_only_examples

    for path in example_files():
        [job] = load_file(path)
        stages = [s.spec for s in job.pipeline.stages] if job.pipeline else [job.config]
        assert all(config is not None for config in stages)
        if any(cluster_problems(config) for config in stages if config is not None):
            assert path in local_only_examples(), path


def test_the_distillation_teacher_is_rendered_where_the_trainer_places_it() -> None:
    """The teacher is a role of the shared layout: colocated with the actor in the tiny
    example (one device group, one worker pod), on devices of its own otherwise."""
    import yaml

    from support.examples import EXAMPLES

    doc = yaml.safe_load((EXAMPLES / "tiny-distillation-cpu.yaml").read_text())
    for colocated, groups in ((True, {"actor+teacher": 1}), (False, {"actor": 1, "teacher": 2})):
        placement = {**doc["spec"]["placement"], "colocateActorReference": colocated}
        if not colocated:
            placement["teacherGpus"] = 2
        spec = {**doc["spec"], "placement": placement}
        children = render_children(make_job(spec=spec), SETTINGS)
        assert children.allocation.gpus_per_role == groups
        trainer = plan_placement(JobSpec.model_validate(spec).job_config())
        assert {g.name: g.devices for g in trainer.groups} == groups
