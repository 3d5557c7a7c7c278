"""The user's journey on a real cluster: install the chart, apply the tiny CPU RLHFJob, watch it
succeed with trainer progress and a checkpoint on its PVC, see Argo CD call it Healthy, delete it
and see its children garbage-collected. The tests run in file order and share one job."""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e_cluster import Cluster, wait_for
from e2e_job import adapt_for_kind, load_example, tiny_task_config_map
from e2e_settings import OPERATOR_NAMESPACE, TIMEOUT, TRAINER_IMAGE

pytestmark = pytest.mark.e2e

CHILD_KINDS = ("rayjobs.ray.io", "configmaps", "serviceaccounts", "roles", "rolebindings")


@pytest.fixture(scope="module")
def job_name(cluster: Cluster, operator: str, namespace: str) -> str:
    job = adapt_for_kind(load_example(), image=TRAINER_IMAGE, namespace=namespace)
    cluster.apply(tiny_task_config_map(namespace))
    cluster.apply(job)
    return str(job["metadata"]["name"])


@pytest.fixture(scope="module")
def finished(cluster: Cluster, namespace: str, job_name: str) -> dict[str, Any]:
    """The RLHFJob once it reached a final phase (fails fast on Failed)."""

    def final() -> dict[str, Any] | None:
        job = cluster.get("rlhfjob", job_name, namespace)
        phase = (job or {}).get("status", {}).get("phase")
        return job if phase in ("Succeeded", "Failed") else None

    return wait_for(
        final,
        timeout=TIMEOUT,
        interval=10,
        what=f"RLHFJob {namespace}/{job_name} to finish",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )


def test_job_succeeds(cluster: Cluster, namespace: str, finished: dict[str, Any]) -> None:
    status = finished["status"]
    assert status["phase"] == "Succeeded", (
        json.dumps(status, indent=2) + "\n" + cluster.diagnostics(namespace, OPERATOR_NAMESPACE)
    )
    assert status["observedGeneration"] == finished["metadata"]["generation"]
    assert status.get("completionTime")
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Complete"]["status"] == "True"


def test_trainer_reported_progress_and_checkpoints(finished: dict[str, Any]) -> None:
    trainer = finished["status"]["trainer"]
    assert trainer["totalSteps"] > 0
    assert trainer["step"] == trainer["totalSteps"]
    assert trainer["progress"] == f"{trainer['step']}/{trainer['totalSteps']}"
    assert trainer["checkpoints"], "no checkpoint reported"
    # On the job's storage volume, in the job's own directory (builders/volumes.py).
    assert trainer["checkpoints"][-1]["path"].startswith(
        f"/storage/{finished['metadata']['name']}/"
    )


def test_status_names_the_outputs_on_the_volume(finished: dict[str, Any]) -> None:
    name = finished["metadata"]["name"]
    output = finished["status"]["output"]
    base = f"pvc://{name}-checkpoints/{name}/output"
    assert output["model"] == f"{base}/final/actor"  # the policy; PPO's critic beside it
    assert output["metrics"] == f"{base}/metrics.jsonl"


def test_ray_job_succeeded(cluster: Cluster, namespace: str, job_name: str) -> None:
    ray_jobs = cluster.list("rayjobs.ray.io", namespace, f"rlhf.dev/job={job_name}")
    assert ray_jobs, "no RayJob labelled with the RLHFJob"
    assert ray_jobs[-1]["status"]["jobStatus"] == "SUCCEEDED"


def test_checkpoint_is_on_the_volume(
    cluster: Cluster, namespace: str, job_name: str, finished: dict[str, Any]
) -> None:
    path = finished["status"]["trainer"]["checkpoints"][-1]["path"]
    pod = f"{job_name}-checkpoint-check"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000},
                "containers": [
                    {
                        "name": "ls",
                        "image": TRAINER_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["ls", "-1", path],
                        "volumeMounts": [{"name": "checkpoints", "mountPath": "/storage"}],
                    }
                ],
                "volumes": [
                    {
                        "name": "checkpoints",
                        "persistentVolumeClaim": {"claimName": f"{job_name}-checkpoints"},
                    }
                ],
            },
        }
    )
    wait_for(
        lambda: (
            (cluster.get("pod", pod, namespace) or {}).get("status", {}).get("phase")
            in ("Succeeded", "Failed")
            or None
        ),
        timeout=300,
        what=f"pod {pod}",
    )
    listing = cluster.kubectl("logs", pod, "-n", namespace)
    phase = cluster.get("pod", pod, namespace)["status"]["phase"]  # type: ignore[index]
    cluster.kubectl("delete", "pod", pod, "-n", namespace, "--wait=false")
    assert phase == "Succeeded", listing
    assert listing.split(), f"checkpoint directory {path} is empty"


def test_argocd_reports_healthy(finished: dict[str, Any]) -> None:
    from argocd_lua import run_health_check

    health = run_health_check(finished)
    assert health["status"] == "Healthy", health


def test_delete_collects_children_and_keeps_checkpoints(
    cluster: Cluster, namespace: str, job_name: str, finished: dict[str, Any]
) -> None:
    cluster.kubectl("delete", "rlhfjob", job_name, "-n", namespace, "--wait=true", timeout=300)
    selector = f"rlhf.dev/job={job_name}"

    def children_left() -> dict[str, list[str]]:
        return {
            kind: [c["metadata"]["name"] for c in cluster.list(kind, namespace, selector)]
            for kind in CHILD_KINDS
        }

    wait_for(
        lambda: True if not any(children_left().values()) else None,
        timeout=300,
        what=f"garbage collection of {children_left()}",
    )
    # retainOnDelete (the default): the checkpoints outlive the job, for a resumed run.
    claim = cluster.get("pvc", f"{job_name}-checkpoints", namespace)
    assert claim is not None and "ownerReferences" not in claim["metadata"]
    cluster.kubectl("delete", "pvc", f"{job_name}-checkpoints", "-n", namespace, "--wait=false")
