"""Builders: golden YAML of every child, schema validity (KubeRay CRD, Kubernetes core), and
the properties each child must have.

Regenerate the golden files after an intended change with
`RLHF_UPDATE_GOLDEN=1 .venv/bin/pytest operator/tests/pure/test_builders.py` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from rlhf_operator.api.v1alpha1 import RLHFJob
from rlhf_operator.builders.children import render_children
from rlhf_operator.builders.common import BuildError, multiply_quantity
from rlhf_operator.builders.rayjob import PRE_STOP
from rlhf_operator.render import PLACEHOLDER_UID, render_file, to_yaml
from rlhf_operator.settings import OperatorSettings
from support.examples import example_files, local_only_examples

from .factories import job_body, make_job
from .kuberay import rayjob_errors

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
FIXTURE_FILES = sorted(FIXTURES.glob("*.yaml"))
KUBERNETES_VERSION = "1.33.0"


def _render(path: Path) -> list[dict[str, Any]]:
    [rendered] = render_file(path, SETTINGS)
    assert not rendered.problems, rendered.problems
    return rendered.objects


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_golden(path: Path) -> None:
    text = to_yaml(_render(path))
    golden = GOLDEN / f"{path.stem}.yaml"
    if os.environ.get("RLHF_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run with RLHF_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), f"{golden.name} differs: RLHF_UPDATE_GOLDEN=1 to accept"


def _example_and_fixture_files() -> list[Path]:
    """The fixtures and every example a cluster can take as written; the tiny CPU examples
    name files beside them, so a cluster takes them through their kustomization (rendered in
    deploy_tests/test_kustomize.py)."""
    return FIXTURE_FILES + [p for p in example_files() if p not in local_only_examples()]


@pytest.mark.parametrize("path", _example_and_fixture_files(), ids=lambda p: p.stem)
def test_every_rayjob_validates_against_kuberay_crd(path: Path) -> None:
    for rendered in render_file(path, SETTINGS):
        assert not rendered.problems, rendered.problems
        ray_jobs = [o for o in rendered.objects if o["kind"] == "RayJob"]
        assert ray_jobs  # one per job; a pipeline's file, one per stage
        for ray_job in ray_jobs:
            assert rayjob_errors(ray_job) == []


@pytest.mark.parametrize("path", _example_and_fixture_files(), ids=lambda p: p.stem)
def test_core_children_validate_against_kubernetes_schemas(path: Path) -> None:
    for rendered in render_file(path, SETTINGS):
        for obj in rendered.objects:
            if obj["kind"] in {"RayJob", "RLHFJob"}:  # custom resources: checked elsewhere
                continue
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("suspend", "attempt"), [(False, 0), (True, 0), (False, 3)], ids=["run", "suspend", "retry3"]
)
def test_rayjob_variants_validate(suspend: bool, attempt: int) -> None:
    job = make_job(placement={"queueName": None})
    ray_job = render_children(job, SETTINGS, attempt=attempt, suspend=suspend).ray_job
    assert rayjob_errors(ray_job) == []
    assert ray_job["metadata"]["name"] == f"ppo-7b-r{attempt}"
    assert ray_job["spec"]["suspend"] is suspend


def _objects(name: str) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in _render(FIXTURES / f"{name}.yaml")}


def test_children_are_owned_named_and_labelled() -> None:
    children = _render(FIXTURES / "ppo-7b-paper.yaml")
    assert [o["kind"] for o in children] == [
        "ServiceAccount",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "RayJob",
    ]
    for obj in children:
        kind, meta = obj["kind"], obj["metadata"]
        assert meta["namespace"] == "team-a"
        assert meta["name"].startswith("ppo-7b-")
        assert meta["labels"]["rlhf.dev/job"] == "ppo-7b"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "rlhf-operator"
        # retainOnDelete (default): the PVC outlives the job, so it has no owner.
        owners = meta.get("ownerReferences", [])
        assert (owners == []) == (kind == "PersistentVolumeClaim"), kind
        for ref in owners:
            assert (ref["kind"], ref["name"], ref["controller"]) == ("RLHFJob", "ppo-7b", True)
        if not owners:
            # Ownership without a reference: the job's UID, which only this job has.
            assert meta["annotations"] == {"rlhf.dev/job-uid": PLACEHOLDER_UID}


def test_not_retained_pvc_is_owned() -> None:
    pvc = _objects("dpo-cpu")["PersistentVolumeClaim"]
    assert pvc["metadata"]["ownerReferences"][0]["kind"] == "RLHFJob"


def test_role_allows_patching_only_this_jobs_report_and_reading_events() -> None:
    role = _objects("ppo-7b-paper")["Role"]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["ppo-7b-report"],
            "verbs": ["patch"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]},
    ]


def test_configmap_holds_the_pod_view_of_the_job_config() -> None:
    config = yaml.safe_load(_objects("grpo-hybrid-reward-fn")["ConfigMap"]["data"]["job.yaml"])
    path = "/inputs/configmap/math-reward/reward_func.py"
    assert config["models"]["rewardFunction"]["path"] == path
    assert "configMapRef" not in config["models"]["rewardFunction"]
    # The user's claim (shared-checkpoints) may hold several jobs: each writes in its own dir.
    assert config["checkpoint"]["dir"] == "/storage/grpo-math/checkpoints"
    # Kubernetes-only parts stay out of the trainer's file.
    assert set(config["runPolicy"]) == {"guardrails"} and "image" not in config  # operator-only
    # ...and what remains is a valid job config.
    from rlhf_trainer.config import JobConfig

    JobConfig.model_validate(config)


def test_rayjob_pods() -> None:
    ray_job = _objects("ppo-7b-paper")["RayJob"]
    spec = ray_job["spec"]
    assert spec["entrypoint"] == (
        "python -m rlhf_trainer run --config /etc/rlhf/job.yaml --resume auto "
        "--run-dir /storage/ppo-7b/output"
    )
    assert (spec["shutdownAfterJobFinishes"], spec["backoffLimit"]) == (True, 0)
    # Queued (Kueue): created suspended, Kueue admits by unsuspending.
    assert spec["suspend"] is True
    assert ray_job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
    cluster = spec["rayClusterSpec"]
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    head_limits = head["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in head_limits
    [workers] = cluster["workerGroupSpecs"]
    assert (workers["groupName"], workers["replicas"]) == ("gpu8", 2)
    assert workers["rayStartParams"] == {"num-gpus": "8"}
    pod = workers["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["serviceAccountName"] == "ppo-7b-trainer"
    assert pod["priorityClassName"] == "training-high"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["RLHF_JOB_NAME"]["value"] == "ppo-7b"  # the spec cannot override it
    assert env["RLHF_JOB_NAMESPACE"]["value"] == "team-a"
    assert env["RLHF_CHECKPOINT_DIR"]["value"] == "/storage/ppo-7b/checkpoints"
    assert env["RAY_JOB_STOP_WAIT_TIME_S"]["value"] == "300"  # the pods' grace period
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    assert env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "wandb"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["storage"]["persistentVolumeClaim"]["claimName"] == "ppo-7b-checkpoints"
    assert volumes["job-config"]["configMap"]["name"] == "ppo-7b-config"


@pytest.mark.parametrize(
    ("policy", "grace"), [({}, 300), ({"checkpointOnPreemptionSeconds": 900}, 900)]
)
def test_pods_get_the_grace_to_checkpoint_on_preemption(policy: dict[str, Any], grace: int) -> None:
    ray_job = render_children(make_job(runPolicy=policy), SETTINGS).ray_job
    cluster = ray_job["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"]]
    templates += [group["template"] for group in cluster["workerGroupSpecs"]]
    assert [t["spec"]["terminationGracePeriodSeconds"] for t in templates] == [grace] * len(
        templates
    )
    # Every Ray pod (not the submitter) has the driver checkpoint before it goes.
    hooks = [t["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"] for t in templates]
    assert hooks == [{"command": PRE_STOP}] * len(templates)
    assert "python -m rlhf_trainer prestop" in PRE_STOP[-1]
    submitter = ray_job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]
    assert "lifecycle" not in submitter
    assert rayjob_errors(ray_job) == []


def test_custom_accelerators_and_resume_policy() -> None:
    ray_job = _objects("grpo-hybrid-reward-fn")["RayJob"]
    assert "--resume never --run-dir /storage/grpo-math/output" in ray_job["spec"]["entrypoint"]
    [workers] = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["rayStartParams"] == {"num-gpus": "8", "resources": "'{\"accel\": 8}'"}
    pod = workers["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "8"
    assert pod["schedulerName"] == "volcano"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["storage"]["persistentVolumeClaim"]["claimName"] == "shared-checkpoints"
    assert volumes["input-configmap-0"]["configMap"] == {
        "name": "math-reward",
        "items": [{"key": "reward_func.py", "path": "reward_func.py"}],
    }


def test_cpu_device_pods_request_no_gpus() -> None:
    ray_job = _objects("dpo-cpu")["RayJob"]
    [workers] = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    limits = workers["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "1000m", "memory": "3Gi"}
    # No GPU is requested from Kubernetes; Ray gets logical ones for the trainer's bundles.
    assert workers["rayStartParams"] == {"num-gpus": "2"}


def test_cpu_device_with_a_custom_ray_resource() -> None:
    job = make_job(placement={"device": "cpu", "rayResource": "GPU-like", "gpusPerNode": 8})
    ray_job = render_children(job, SETTINGS).ray_job
    [workers] = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["rayStartParams"] == {"num-gpus": "0", "resources": "'{\"GPU-like\": 5}'"}
    assert rayjob_errors(ray_job) == []


def test_no_image_anywhere_names_the_field_and_the_setting() -> None:
    job = make_job()
    with pytest.raises(BuildError, match=r"spec\.image: .*RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE"):
        render_children(job, OperatorSettings())


def test_render_reports_invalid_documents(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: rlhf.dev/v1alpha1\nkind: RLHFJob\nmetadata: {name: x}\n"
        "spec: {algorithm: {name: grpo}, models: {actor: {pretrained: a}}, "
        "data: {train: [{hfId: d}]}}\n"
    )
    [rendered] = render_file(bad, SETTINGS)
    assert rendered.objects == []
    assert any(p.startswith("spec.") for p in rendered.problems), rendered.problems


@pytest.mark.parametrize(
    ("quantity", "factor", "expected"),
    [
        ("8", 4, "32"),
        ("64Gi", 2, "128Gi"),
        ("500m", 3, "1500m"),
        ("1.5Gi", 3, "4.5Gi"),
        ("10", 8, "80"),
        ("0.5", 2, "1"),
    ],
)
def test_multiply_quantity(quantity: str, factor: int, expected: str) -> None:
    assert multiply_quantity(quantity, factor) == expected


def test_rendering_is_deterministic() -> None:
    job: RLHFJob = make_job()
    first = render_children(job, SETTINGS).all
    assert render_children(job, SETTINGS).all == first


def test_job_yaml_is_rendered_once_per_config_and_matches_pyyaml(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rlhf_operator.builders import configmap

    monkeypatch.setattr(configmap, "_RENDERED", type(configmap._RENDERED)())
    monkeypatch.setattr(configmap, "RENDERED_CACHE_SIZE", 2)
    dumps: list[object] = []
    real_dump, real_block = yaml.dump, configmap.dump_block

    def counted(data: object) -> Any:
        dumps.append(data)
        return real_block(data)

    monkeypatch.setattr(configmap, "dump_block", counted)
    first, other = make_job(), make_job(name="other-job")
    text = configmap.render_job_yaml(first)
    assert configmap.render_job_yaml(first) == text  # the same config: no second render
    assert len(dumps) == 1
    assert text == real_dump(
        configmap.pod_job_config(first), Dumper=configmap._Dumper, sort_keys=False
    )
    assert configmap.render_job_yaml(other) != text
    configmap.render_job_yaml(make_job(name="third-job"))
    assert len(configmap._RENDERED) == 2  # bounded: the least recently used went
    assert configmap.render_job_yaml(first) == text and len(dumps) == 4


def test_the_pods_job_config_keeps_an_explicit_null_over_a_default() -> None:
    """The CRD keeps `rewardClip: null` (nullable); the pod's job.yaml must too, or the
    trainer would clip at the default 10 although the spec turned clipping off."""
    from rlhf_operator.builders import configmap

    body = job_body()
    body["spec"]["algorithm"]["rewardClip"] = None  # as the API server stores it
    job = RLHFJob.model_validate(body)
    rendered = yaml.safe_load(configmap.render_job_yaml(job))
    assert rendered["algorithm"]["rewardClip"] is None
    assert "rewardClip" in make_job().spec.to_manifest()["algorithm"]  # the default, 10
