"""Security properties against the real operator: the Ray token is made once and never
rotated by re-renders, retries or restarts; foreign objects with a child's name are never
taken over; the trainer's report is validated before it reaches the status."""

from __future__ import annotations

import base64
import json
from typing import Any

from rlhf_trainer.config.report import OUTCOME_KEY, PROGRESS_KEY

from .harness import RAYJOBS, Cluster, operator_running, ppo_manifest


def _token(c: Cluster, job: str) -> str:
    secret = c.k8s.get("secrets", f"{job}-ray-token", "default")
    return base64.b64decode(secret["data"]["auth_token"]).decode()


async def test_ray_token_is_made_once_and_never_rotated(cluster: Cluster) -> None:
    c = cluster
    async with operator_running():
        c.create(ppo_manifest("ppo-t", runPolicy={"backoffLimit": 2}))
        await c.until(lambda: c.ray_jobs("ppo-t"), "RayJob")
        token = _token(c, "ppo-t")
        assert len(token) >= 40  # 32 random bytes, URL-safe
        secret = c.k8s.get("secrets", "ppo-t-ray-token", "default")
        assert secret["immutable"] is True
        assert secret["metadata"]["ownerReferences"][0]["name"] == "ppo-t"
        [ray_job] = c.ray_jobs("ppo-t")
        cluster_spec = ray_job["spec"]["rayClusterSpec"]
        assert cluster_spec["authOptions"] == {"mode": "token", "secretName": "ppo-t-ray-token"}
        # A spec edit re-renders every child (the RayJob is replaced): the token stays.
        c.edit_spec("ppo-t", {"placement": {"priorityClassName": "high"}})
        await c.until(
            lambda: (
                c.ray_jobs("ppo-t")[0]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"][
                    "spec"
                ].get("priorityClassName")
                == "high"
            ),
            "RayJob updated",
        )
        # A failed attempt is retried by a fresh RayJob (a fresh Ray cluster): same token.
        c.kuberay("ppo-t-r0", jobDeploymentStatus="Failed", jobStatus="FAILED")
        await c.until(lambda: c.k8s.find(RAYJOBS, "ppo-t-r1", "default"), "attempt 1")
    # A new operator process (nothing remembered) finds the Secret and leaves it as it is.
    async with operator_running():
        c.kuberay("ppo-t-r1", jobDeploymentStatus="Running", jobStatus="RUNNING")
        await c.phase("ppo-t", "Running")
    assert _token(c, "ppo-t") == token
    created = [
        r
        for r in c.k8s.requests.records
        if (r.verb, r.resource, r.code) == ("create", "secrets", 201)
    ]
    assert len(created) == 1
    # Never updated, patched or deleted by the operator.
    assert not [
        r
        for r in c.k8s.requests.records
        if r.resource == "secrets" and r.verb not in {"get", "create"}
    ]


def _foreign(c: Cluster, resource: str, body: dict[str, Any]) -> dict[str, Any]:
    return c.k8s.create(resource, body, "default")


async def test_foreign_objects_with_child_names_stay_byte_identical(operator: Cluster) -> None:
    c = operator
    # What a job author (or another tenant) could plant to have the operator take it over:
    # a ServiceAccount bound to a cloud identity, a Role granting more than the trainer's,
    # and a PVC holding someone else's data, even one labelled as the operator's.
    planted = {
        "serviceaccounts": _foreign(
            c,
            "serviceaccounts",
            {
                "metadata": {
                    "name": "ppo-f-trainer",
                    "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/admin"},
                }
            },
        ),
        "roles.rbac.authorization.k8s.io": _foreign(
            c,
            "roles.rbac.authorization.k8s.io",
            {
                "metadata": {"name": "ppo-f-trainer"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
            },
        ),
        "persistentvolumeclaims": _foreign(
            c,
            "persistentvolumeclaims",
            {
                "metadata": {
                    "name": "ppo-f-checkpoints",
                    "labels": {"app.kubernetes.io/managed-by": "rlhf-operator"},
                },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        ),
    }
    c.create(ppo_manifest("ppo-f", checkpoint={"storage": {"size": "10Gi"}}))
    await c.until(
        lambda: c.conditions("ppo-f").get("ChildrenApplied") == ("False", "ChildConflict"),
        "ChildConflict",
    )
    await c.until(lambda: "ChildConflict" in c.reasons("ppo-f"), "ChildConflict event")
    [applied] = [x for x in c.status("ppo-f")["conditions"] if x["type"] == "ChildrenApplied"]
    for named in (
        "ServiceAccount ppo-f-trainer (not created by this job)",
        "Role ppo-f-trainer (not created by this job)",
        "PersistentVolumeClaim ppo-f-checkpoints (not created by this job)",
    ):
        assert named in applied["message"]
    assert c.conditions("ppo-f")["Admitted"] == ("False", "ChildConflict")
    assert not c.ray_jobs("ppo-f")  # no pod may run as that ServiceAccount
    for resource, before in planted.items():
        name = before["metadata"]["name"]
        assert c.k8s.get(resource, name, "default") == before, resource
    # Nothing else was written to them: no update, patch or delete ever reached them.
    writes = [
        r
        for r in c.k8s.requests.records
        if r.verb in {"update", "patch", "delete"}
        and (r.resource, r.name)
        in {(resource, o["metadata"]["name"]) for resource, o in planted.items()}
    ]
    assert writes == []


async def test_trainer_report_is_validated_then_mirrored(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-r", runPolicy={"backoffLimit": 0}))
    await c.until(lambda: c.ray_jobs("ppo-r"), "RayJob")
    c.kuberay("ppo-r-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-r", "Running")
    c.trainer_reports("ppo-r", {"step": 3, "totalSteps": 10, "progress": "3/10"})
    await c.until(lambda: c.status("ppo-r").get("trainer", {}).get("step") == 3, "mirrored")

    # Garbage and keys the model does not know are dropped, never stored on the status.
    report = "ppo-r-report"
    hostile = {"step": 4, "phase": "Succeeded", "conditions": [], "outcome": {"exitCode": 0}}
    c.k8s.patch("configmaps", report, {"data": {PROGRESS_KEY: json.dumps(hostile)}}, "default")
    await c.until(lambda: c.status("ppo-r").get("trainer", {}).get("step") == 0, "dropped")
    status = c.status("ppo-r")
    assert status["phase"] == "Running" and "outcome" not in status["trainer"]
    c.k8s.patch("configmaps", report, {"data": {OUTCOME_KEY: "not json"}}, "default")
    # A ConfigMap that merely looks like a report (labels can be copied) is not this job's.
    c.k8s.create(
        "configmaps",
        {
            "metadata": {
                "name": "ppo-r-report-2",
                "labels": {
                    "rlhf.dev/job": "ppo-r",
                    "app.kubernetes.io/component": "report",
                    "app.kubernetes.io/managed-by": "rlhf-operator",
                },
            },
            "data": {PROGRESS_KEY: json.dumps({"step": 9, "progress": "9/10"})},
        },
        "default",
    )
    c.trainer_reports("ppo-r", {"step": 5, "totalSteps": 10, "progress": "5/10"})
    await c.until(lambda: c.status("ppo-r").get("trainer", {}).get("step") == 5, "mirrored again")
    assert c.status("ppo-r")["phase"] == "Running"
    row = await c.printer_row("ppo-r")
    assert row["Progress"] == "5/10"
