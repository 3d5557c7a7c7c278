"""The job's storage and files on a cluster: a storage PVC always (never pod-local scratch),
ReadWriteMany by default, the head beside the one worker of a ReadWriteOnce job, pvc:// and
ConfigMap inputs mounted where the job config says, outputs named on status once succeeded,
and files of the author's machine refused."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml

from rlhf_operator.api.v1alpha1 import Phase
from rlhf_operator.builders.children import render_children
from rlhf_operator.builders.volumes import referenced_objects
from rlhf_operator.reconcile.decide import decide
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.settings import OperatorSettings

from .factories import conditions, job_body, make_job, ray_job

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")


def _children(**sections: Any) -> dict[str, Any]:
    children = render_children(make_job(**sections), SETTINGS)
    return {obj["kind"]: obj for obj in children.all}


def _head_and_worker(ray_job_obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    cluster = ray_job_obj["spec"]["rayClusterSpec"]
    return cluster["headGroupSpec"]["template"]["spec"], cluster["workerGroupSpecs"][0]["template"][
        "spec"
    ]


def test_a_job_without_storage_gets_a_read_write_many_pvc_of_the_default_size() -> None:
    pvc = _children()["PersistentVolumeClaim"]
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "50Gi"}},
    }
    assert "ownerReferences" not in pvc["metadata"]  # kept after the job: it holds the model
    custom = OperatorSettings(default_trainer_image="t:1", default_storage_size="2Ti")
    [pvc] = [
        o
        for o in render_children(make_job(), custom).support
        if o["kind"] == "PersistentVolumeClaim"
    ]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "2Ti"


def test_every_pod_mounts_the_storage_and_writes_in_its_jobs_directory() -> None:
    objects = _children()
    head, worker = _head_and_worker(objects["RayJob"])
    for pod in (head, worker):
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["storage"]["persistentVolumeClaim"]["claimName"] == "ppo-7b-checkpoints"
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["storage"] == "/storage"
    config = yaml.safe_load(objects["ConfigMap"]["data"]["job.yaml"])
    assert config["checkpoint"]["dir"] == "/storage/ppo-7b/checkpoints"
    assert objects["RayJob"]["spec"]["entrypoint"].endswith("--run-dir /storage/ppo-7b/output")


def test_read_write_once_keeps_the_head_beside_the_one_worker() -> None:
    objects = _children(checkpoint={"storage": {"size": "10Gi", "accessMode": "ReadWriteOnce"}})
    assert objects["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    head, worker = _head_and_worker(objects["RayJob"])
    [term] = head["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {
        "rlhf.dev/job": "ppo-7b",
        "app.kubernetes.io/component": "ray-worker",
        "rlhf.dev/attempt": "0",
    }
    assert "affinity" not in worker
    assert "affinity" not in _head_and_worker(_children()["RayJob"])[0]  # ReadWriteMany


INPUTS = {
    "data": {
        "train": [
            {"path": "pvc://datasets/math/train.jsonl", "probability": 0.5},
            {"configMapRef": {"name": "prompts", "key": "extra.jsonl"}, "probability": 0.5},
        ],
        "eval": [{"path": "pvc://ppo-7b-checkpoints/eval.jsonl"}],
    },
    "models": {
        "actor": {"pretrained": "pvc://models/llama-8b-sft"},
        "rewardModels": [{"pretrained": "org/rm-7b"}],
        "rewardFunction": {"configMapRef": {"name": "prompts", "key": "reward.py"}},
    },
}


def test_inputs_are_mounted_read_only_where_the_job_config_names_them() -> None:
    objects = _children(**INPUTS)
    config = yaml.safe_load(objects["ConfigMap"]["data"]["job.yaml"])
    assert config["data"]["train"][0]["path"] == "/inputs/pvc/datasets/math/train.jsonl"
    assert config["data"]["train"][1]["path"] == "/inputs/configmap/prompts/extra.jsonl"
    assert "configMapRef" not in config["data"]["train"][1]
    # The job's own storage claim is mounted once, read-write, at /storage.
    assert config["data"]["eval"][0]["path"] == "/storage/eval.jsonl"
    assert config["models"]["actor"]["pretrained"] == "/inputs/pvc/models/llama-8b-sft"
    assert config["models"]["rewardModels"][0]["pretrained"] == "org/rm-7b"
    assert config["models"]["rewardFunction"]["path"] == "/inputs/configmap/prompts/reward.py"
    head, _ = _head_and_worker(objects["RayJob"])
    volumes = {v["name"]: v for v in head["volumes"]}
    mounts = {m["name"]: m for m in head["containers"][0]["volumeMounts"]}
    claims = {
        volumes[n]["persistentVolumeClaim"]["claimName"]: mounts[n]
        for n in volumes
        if n.startswith("input-pvc")
    }
    assert set(claims) == {"datasets", "models"}
    assert all(m["readOnly"] for m in claims.values())
    assert claims["models"]["mountPath"] == "/inputs/pvc/models"
    [cm] = [v["configMap"] for n, v in volumes.items() if n.startswith("input-configmap")]
    assert cm["name"] == "prompts"
    assert [i["key"] for i in cm["items"]] == ["extra.jsonl", "reward.py"]


def test_the_operator_waits_for_every_input_it_mounts() -> None:
    found = {(kind, name) for kind, name, _ in referenced_objects(make_job(**INPUTS))}
    assert found == {
        ("PersistentVolumeClaim", "datasets"),
        ("PersistentVolumeClaim", "models"),
        ("ConfigMap", "prompts"),
    }


def test_files_of_the_authors_machine_are_refused_with_nothing_created() -> None:
    body = job_body(data={"train": [{"path": "tiny-task/prompts.jsonl"}]})
    decision = decide(body, Observed(), SETTINGS, NOW)
    assert decision.apply == ()
    assert decision.invalid is not None
    assert "spec.data.train[0].path: 'tiny-task/prompts.jsonl' is a file on your machine" in (
        decision.invalid
    )
    assert "pvc://<claim>/<path>" in decision.invalid
    assert conditions(decision.status)["Valid"] == ("False", "SpecInvalid")


def test_a_succeeded_job_names_where_its_results_are() -> None:
    body = job_body(output={"uri": "s3://models/team-a/ppo-7b"})
    running = decide(body, Observed.of([ray_job(0, "Running", "RUNNING")]), SETTINGS, NOW)
    # The logs from the first attempt on (a failed job's matter most); results only at the end.
    assert running.status.output is not None
    assert running.status.output.model_dump(exclude_none=True) == {
        "logs": "pvc://ppo-7b-checkpoints/ppo-7b/logs",
        "uploaded": "s3://models/team-a/ppo-7b",
    }
    done = decide(body, Observed.of([ray_job(0, "Complete", "SUCCEEDED")]), SETTINGS, NOW)
    assert done.status.phase is Phase.SUCCEEDED
    assert done.status.output is not None
    assert done.status.output.model_dump() == {
        "model": "pvc://ppo-7b-checkpoints/ppo-7b/output/final/actor",
        "metrics": "pvc://ppo-7b-checkpoints/ppo-7b/output/metrics.jsonl",
        "tensorboard": "pvc://ppo-7b-checkpoints/ppo-7b/output/tensorboard",
        "logs": "pvc://ppo-7b-checkpoints/ppo-7b/logs",
        "uploaded": "s3://models/team-a/ppo-7b",
        "best": None,
    }
