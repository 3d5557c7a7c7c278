"""Create -> children; KubeRay's states -> phases, conditions, events; trainer progress."""

from __future__ import annotations

import asyncio
import dataclasses

import kubernetes_validate

from pure.kuberay import rayjob_errors

from .harness import TEST_SETTINGS, Cluster, manifest, operator_running, ppo_manifest

STATUS_PATCH = ("patch", "rlhfjobs.rlhf.dev/status")


async def test_create_makes_valid_owned_children(operator: Cluster) -> None:
    c = operator
    job = c.create(manifest("dpo-cpu", namespace="default"))
    uid = job["metadata"]["uid"]
    await c.until(lambda: c.ray_jobs("dpo-tiny"), "RayJob created")
    children = c.children("dpo-tiny")
    assert children == {
        "ServiceAccount": ["dpo-tiny-trainer"],
        "ConfigMap": ["dpo-tiny-config", "dpo-tiny-report"],
        "Secret": ["dpo-tiny-ray-token"],
        "NetworkPolicy": ["dpo-tiny-ray"],
        "PersistentVolumeClaim": ["dpo-tiny-checkpoints"],
        "Role": ["dpo-tiny-trainer"],
        "RoleBinding": ["dpo-tiny-trainer"],
        "RayJob": ["dpo-tiny-r0"],
    }
    [ray_job] = c.ray_jobs("dpo-tiny")
    assert ray_job["metadata"]["ownerReferences"][0]["uid"] == uid
    stored = {k: v for k, v in ray_job.items() if k != "status"}
    assert rayjob_errors(stored) == []
    for resource, name in (
        ("configmaps", "dpo-tiny-config"),
        ("configmaps", "dpo-tiny-report"),
        ("secrets", "dpo-tiny-ray-token"),
        ("networkpolicies.networking.k8s.io", "dpo-tiny-ray"),
        ("serviceaccounts", "dpo-tiny-trainer"),
        ("roles.rbac.authorization.k8s.io", "dpo-tiny-trainer"),
        ("rolebindings.rbac.authorization.k8s.io", "dpo-tiny-trainer"),
        ("persistentvolumeclaims", "dpo-tiny-checkpoints"),
    ):
        obj = c.k8s.get(resource, name, "default")
        assert obj["metadata"]["ownerReferences"][0]["uid"] == uid, resource
        kubernetes_validate.validate(obj, "1.33.0", strict=False)
    # KubeRay has not acted on the RayJob yet: the cluster is being provisioned.
    status = await c.phase("dpo-tiny", "Provisioning")
    assert status["allocation"]["gpusPerRole"] == {"actor": 2, "reference": 2}
    assert status["allocation"]["device"] == "cpu" and status["totalGpus"] == 0
    assert status["observedGeneration"] == 1
    assert c.conditions("dpo-tiny")["Valid"] == ("True", "SpecValid")
    # kopf keeps nothing on the job (no diff-base or progress annotations, no finalizer):
    # the operator's handlers of RLHFJobs are event handlers, which need none.
    await asyncio.sleep(0.5)
    meta = c.job("dpo-tiny")["metadata"]  # type: ignore[index]
    assert not [k for k in meta.get("annotations") or {} if k.startswith("rlhf.dev/")]
    assert "finalizers" not in meta


async def test_the_first_status_waits_for_kuberays_word_on_the_rayjob(cluster: Cluster) -> None:
    """Between a new job's RayJob and KubeRay's first status of it, the job's status would say
    only that KubeRay has not looked yet: none is written, and no pass runs for the RayJob's
    own event; KubeRay's word is written in one patch."""
    c = cluster
    settings = dataclasses.replace(TEST_SETTINGS, first_status_grace_seconds=60.0)
    async with operator_running(settings):
        c.create(ppo_manifest("ppo-w"))
        await c.until(lambda: c.ray_jobs("ppo-w"), "RayJob created")
        await asyncio.sleep(0.5)  # the RayJob's own event has come and gone
        assert not c.job("ppo-w").get("status")  # type: ignore[union-attr]
        c.kuberay("ppo-w-r0", jobDeploymentStatus="Initializing")
        await c.phase("ppo-w", "Provisioning")
        await asyncio.sleep(0.5)
    patches = [r for r in c.k8s.requests.records if (r.verb, r.resource) == STATUS_PATCH]
    assert len(patches) == 1


async def test_where_kuberay_stays_silent_the_status_says_so_after_the_grace(
    operator: Cluster,
) -> None:
    c = operator
    c.create(ppo_manifest("ppo-s"))
    await c.until(lambda: c.ray_jobs("ppo-s"), "RayJob created")
    status = await c.phase("ppo-s", "Provisioning", timeout=10)
    assert c.conditions("ppo-s")["Valid"] == ("True", "SpecValid")
    assert status["rayJob"]["name"] == "ppo-s-r0"


async def test_kuberay_states_drive_phases_conditions_and_events(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-a", checkpoint={"everySteps": 5}))
    await c.until(lambda: c.ray_jobs("ppo-a"), "RayJob created")
    c.kuberay("ppo-a-r0", jobDeploymentStatus="Initializing", rayClusterName="ppo-a-r0-x7k2p")
    await c.phase("ppo-a", "Provisioning")
    assert c.conditions("ppo-a")["ClusterReady"] == ("False", "ClusterProvisioning")
    c.kuberay(
        "ppo-a-r0",
        jobDeploymentStatus="Running",
        jobStatus="RUNNING",
        dashboardURL="ppo-a-r0-head-svc.default.svc:8265",
    )
    status = await c.phase("ppo-a", "Running")
    assert status["rayJob"]["dashboardUrl"] == "ppo-a-r0-head-svc.default.svc:8265"
    assert c.conditions("ppo-a")["Running"] == ("True", "Training")

    # The trainer reports progress into its report object; the operator mirrors it.
    c.trainer_reports(
        "ppo-a",
        {
            "step": 5,
            "totalSteps": 20,
            "progress": "5/20",
            "reward": 0.25,
            "checkpoints": [{"step": 5, "path": "/checkpoints/step-5"}],
        },
    )
    await c.until(
        lambda: c.conditions("ppo-a").get("Checkpointed") == ("True", "CheckpointSaved"),
        "Checkpointed",
    )
    row = await c.printer_row("ppo-a")
    assert (row["Phase"], row["Algorithm"], row["Progress"], row["Reward"]) == (
        "Running",
        "ppo",
        "5/20",
        0.25,
    )
    assert (row["GPUs"], row["Restarts"]) == (5, 0)  # actor, critic, reference, reward, vLLM

    c.kuberay(
        "ppo-a-r0",
        jobDeploymentStatus="Complete",
        jobStatus="SUCCEEDED",
        endTime="2026-11-29T12:00:00Z",
    )
    status = await c.phase("ppo-a", "Succeeded")
    assert status["completionTime"] == "2026-11-29T12:00:00Z"
    assert status["trainer"]["progress"] == "5/20"
    assert c.conditions("ppo-a")["Complete"] == ("True", "JobSucceeded")
    await c.until(lambda: "Succeeded" in c.reasons("ppo-a"), "Succeeded event")
    # One Event per transition: the RayJob's creation is in Created (no Admitted beside it),
    # the cluster being ready in Running.
    assert c.reasons("ppo-a") == ["Created", "Running", "CheckpointSaved", "Succeeded"]
    # Finished and idle: nothing more is sent.
    mark = c.k8s.requests.mark()
    await asyncio.sleep(1.0)
    assert c.k8s.requests.counts(since=mark) == {}
