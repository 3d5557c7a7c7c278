"""Run policy against the real operator: retries from checkpoints until backoffLimit, suspend
and resume, deadline, TTL, and spec edits of mutable fields."""

from __future__ import annotations

import asyncio

from .harness import RAYJOBS, Cluster, ppo_manifest


async def test_failed_attempts_retry_with_a_fresh_rayjob_until_backoff_limit(
    operator: Cluster,
) -> None:
    c = operator
    c.create(ppo_manifest("ppo-r", runPolicy={"backoffLimit": 1}))
    await c.until(lambda: c.ray_jobs("ppo-r"), "first RayJob")
    c.kuberay("ppo-r-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-r", "Running")
    c.trainer_reports("ppo-r", {"step": 7, "checkpoints": [{"step": 5, "path": "/ck/5"}]})
    c.kuberay(
        "ppo-r-r0",
        jobDeploymentStatus="Failed",
        jobStatus="FAILED",
        reason="AppFailed",
        message="NCCL timeout",
    )

    # A fresh RayJob (attempt 1) replaces the failed one; why is kept in a condition.
    await c.until(
        lambda: [r["metadata"]["name"] for r in c.ray_jobs("ppo-r")] == ["ppo-r-r1"],
        "attempt 1 replaces attempt 0",
    )
    status = await c.until(
        lambda: (s := c.status("ppo-r")).get("restarts") == 1 and s, "restarts recorded"
    )
    restarted = next(x for x in status["conditions"] if x["type"] == "Restarted")
    assert "NCCL timeout" in restarted["message"]
    assert "resumes from the latest checkpoint" in restarted["message"]
    [attempt1] = c.ray_jobs("ppo-r")
    assert "--resume auto --run-dir /storage/ppo-r/output" in attempt1["spec"]["entrypoint"]
    head = attempt1["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    env = head["containers"][0]["env"]
    assert {"name": "RLHF_JOB_ATTEMPT", "value": "1"} in env

    c.kuberay("ppo-r-r1", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-r", "Running")
    c.kuberay("ppo-r-r1", jobDeploymentStatus="Failed", jobStatus="FAILED", message="again")
    status = await c.phase("ppo-r", "Failed")
    assert c.conditions("ppo-r")["Failed"] == ("True", "BackoffLimitExceeded")
    assert status["restarts"] == 1 and status["completionTime"]
    await asyncio.sleep(0.5)
    assert [r["metadata"]["name"] for r in c.ray_jobs("ppo-r")] == ["ppo-r-r1"]  # no attempt 2
    await c.until(lambda: "BackoffLimitExceeded" in c.reasons("ppo-r"), "event")
    assert c.reasons("ppo-r").count("Retrying") == 1


async def test_suspend_frees_the_cluster_and_resume_continues(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-s"))
    await c.until(lambda: c.ray_jobs("ppo-s"), "RayJob")
    c.kuberay("ppo-s-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    status = await c.phase("ppo-s", "Running")
    assert status["startTime"]

    c.edit_spec("ppo-s", {"runPolicy": {"suspend": True}})
    await c.until(lambda: c.ray_jobs("ppo-s")[0]["spec"]["suspend"] is True, "RayJob suspended")
    c.kuberay("ppo-s-r0", jobDeploymentStatus="Suspended", jobStatus="STOPPED")  # cluster deleted
    status = await c.phase("ppo-s", "Suspended")
    assert "startTime" not in status  # the deadline clock stops
    assert c.conditions("ppo-s")["Suspended"] == ("True", "SuspendedByUser")

    c.edit_spec("ppo-s", {"runPolicy": {"suspend": False}})
    await c.until(lambda: c.ray_jobs("ppo-s")[0]["spec"]["suspend"] is False, "RayJob resumed")
    await c.phase("ppo-s", "Provisioning")
    assert c.conditions("ppo-s")["Suspended"] == ("False", "Resumed")
    c.kuberay("ppo-s-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-s", "Running")
    # Same RayJob throughout: suspension is not a failure and does not count as a restart.
    assert [r["metadata"]["name"] for r in c.ray_jobs("ppo-s")] == ["ppo-s-r0"]
    assert c.status("ppo-s")["restarts"] == 0
    await c.until(lambda: "Resumed" in c.reasons("ppo-s"), "Resumed event")
    assert "Suspended" in c.reasons("ppo-s")


async def test_editing_a_mutable_field_updates_children_in_place(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-e"))
    await c.until(lambda: c.ray_jobs("ppo-e"), "RayJob")
    before = c.ray_jobs("ppo-e")[0]
    c.edit_spec(
        "ppo-e",
        {
            "training": {"actorLearningRate": 5e-7},
            "placement": {"priorityClassName": "research-low"},
        },
    )

    def updated() -> bool:
        [ray_job] = c.ray_jobs("ppo-e")
        pod = ray_job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
        config = c.k8s.get("configmaps", "ppo-e-config", "default")["data"]["job.yaml"]
        return pod.get("priorityClassName") == "research-low" and "5.0e-07" in config

    await c.until(updated, "ConfigMap and RayJob updated")
    after = c.ray_jobs("ppo-e")[0]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # updated, not recreated
    await c.until(lambda: c.status("ppo-e").get("observedGeneration") == 2, "observedGeneration")
    await c.until(lambda: "Updated" in c.reasons("ppo-e"), "Updated event")


async def test_deadline_stops_the_job(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-d", runPolicy={"activeDeadlineSeconds": 2}))
    await c.until(lambda: c.ray_jobs("ppo-d"), "RayJob")
    c.kuberay("ppo-d-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await c.phase("ppo-d", "Failed", timeout=20)
    assert c.conditions("ppo-d")["Failed"] == ("True", "DeadlineExceeded")
    await c.until(lambda: not c.ray_jobs("ppo-d"), "RayJob deleted (cluster freed)")


async def test_ttl_after_finished_deletes_the_job_and_its_children(operator: Cluster) -> None:
    c = operator
    c.create(ppo_manifest("ppo-t", runPolicy={"ttlSecondsAfterFinished": 1}))
    await c.until(lambda: c.ray_jobs("ppo-t"), "RayJob")
    # Finished long ago: the pass that sees it writes the final status and deletes the job, and
    # that status patch's watch event comes after the job is forgotten.
    c.kuberay(
        "ppo-t-r0",
        jobDeploymentStatus="Complete",
        jobStatus="SUCCEEDED",
        endTime="2026-01-01T00:00:00Z",
    )
    await c.until(lambda: c.job("ppo-t") is None, "RLHFJob deleted after its TTL", timeout=20)
    await c.until(lambda: c.k8s.find(RAYJOBS, "ppo-t-r0", "default") is None, "RayJob collected")
    # The status patch's event (or any event) runs a pass while the watch has not yet told
    # the job is gone: it must not make the children again.
    await asyncio.sleep(0.5)
    records = c.k8s.requests.records
    deleted_at = max(
        i for i, r in enumerate(records) if (r.verb, r.resource) == ("delete", "rlhfjobs.rlhf.dev")
    )
    made_after = [(r.verb, r.resource, r.name) for r in records[deleted_at:] if r.code == 201]
    assert [m for m in made_after if m[1] != "events"] == []
